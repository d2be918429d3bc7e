package dispatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
)

// capped1 is a tenant capped at one task in flight.
var capped1 = admission.Quota{Limit: 100_000, Window: time.Second, MaxInFlight: 1}

// A worker cut off from Redis while its task runs keeps the task's place:
// asynq still holds the task (its lease is good), so no other worker's
// repair may free it and start the next task over the cap.
func TestPartitionedWorkerKeepsItsRunningTasksPlace(t *testing.T) {
	s := newStack(t, capped1)
	px := newProxy(t, s.srv.Addr())
	cut := redis.NewClient(&redis.Options{Addr: px.addr(), MaxRetries: -1})
	t.Cleanup(func() { cut.Close() })
	s.startWorkerOn(cut, 2, false)
	if d := s.put("t", "a", "block"); d.Outcome != admission.Admitted {
		t.Fatalf("a: %v, want admitted", d.Outcome)
	}
	eventually(t, 5*time.Second, "a starts", func() bool { return s.ran("a") == 1 })
	if d := s.put("t", "b", "10ms"); d.Outcome != admission.Parked {
		t.Fatalf("b: %v, want parked behind a (cap 1)", d.Outcome)
	}
	px.setStall(true)
	s.startWorker(2, false)                   // its repair passes run every 2 s
	time.Sleep(3*time.Second + 2*time.Second) // past Grace and two repair passes
	if n := s.ran("b"); n != 0 {
		t.Fatalf("b started while a still ran on a partitioned worker: the cap of 1 was broken")
	}
	px.setStall(false)
	s.unblock("a")
	eventually(t, 10*time.Second, "b starts once a finishes", func() bool { return s.ran("b") == 1 })
}

// Two movers of one grant move it once, and a waiting task archived or
// deleted from outside is never revived: the move checks asynq's state in
// the same script.
func TestArchivedOrDeletedWaitingTaskIsNeverRevived(t *testing.T) {
	s := newStack(t, capped1)
	s.startWorker(2, false)
	s.put("t", "a", "block")
	eventually(t, 5*time.Second, "a starts", func() bool { return s.ran("a") == 1 })
	for _, id := range []string{"b", "c", "d"} {
		if d := s.put("t", id, "10ms"); d.Outcome != admission.Parked {
			t.Fatalf("%s: %v, want parked", id, d.Outcome)
		}
	}
	if err := s.ins.ArchiveTask("default", "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.ins.DeleteTask("default", "c"); err != nil {
		t.Fatal(err)
	}
	s.unblock("a")
	eventually(t, 5*time.Second, "d starts", func() bool { return s.ran("d") == 1 })
	time.Sleep(300 * time.Millisecond)
	if s.ran("b") != 0 || s.ran("c") != 0 {
		t.Fatalf("archived b ran %d times, deleted c %d times; want never", s.ran("b"), s.ran("c"))
	}
	info, err := s.ins.GetTaskInfo("default", "b")
	if err != nil || info.State != asynq.TaskStateArchived {
		t.Fatalf("b after the dispatch: %v, %v; want still archived", info, err)
	}
}

// Deleting a capped tenant's waiting tasks from outside costs the tenant
// nothing: each is dropped at its turn and the next one starts at once.
func TestDeletedWaitingTasksDoNotHoldTheCap(t *testing.T) {
	s := newStack(t, capped1)
	s.startWorker(2, false)
	s.put("t", "a", "block")
	eventually(t, 5*time.Second, "a starts", func() bool { return s.ran("a") == 1 })
	for _, id := range []string{"b1", "b2", "b3", "b4", "b5"} {
		s.put("t", id, "10ms")
	}
	s.put("t", "last", "10ms")
	for _, id := range []string{"b1", "b2", "b3", "b4", "b5"} {
		if err := s.ins.DeleteTask("default", id); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(dispatchGrace) // deleted well after they were parked
	start := time.Now()
	s.unblock("a")
	eventually(t, 3*time.Second, "the sixth task starts soon after a", func() bool { return s.ran("last") == 1 })
	t.Logf("the task behind five deleted ones started %v after a finished", time.Since(start).Round(time.Millisecond))
}

// A waiting asynq.Unique task's lock lasts its own TTL from when it goes
// in, not until ParkedUntil: once it ran and was archived, the same unique
// task is accepted again after the TTL.
func TestWaitingUniqueTaskLockLastsItsOwnTTL(t *testing.T) {
	s := newStack(t, capped1)
	s.startWorker(2, false)
	s.put("t", "a", "block")
	eventually(t, 5*time.Second, "a starts", func() bool { return s.ran("a") == 1 })
	ctx := context.Background()
	task := func() *asynq.Task { return asynq.NewTask("unique", []byte("10ms")) }
	if _, d, err := s.client.Enqueue(ctx, "t", task(), asynq.Unique(2*time.Second), asynq.MaxRetry(0)); err != nil || d.Outcome != admission.Parked {
		t.Fatalf("unique task: %v, %v; want parked", d.Outcome, err)
	}
	s.unblock("a")
	time.Sleep(3500 * time.Millisecond)
	_, _, err := s.client.Enqueue(ctx, "t", task(), asynq.Unique(2*time.Second))
	if errors.Is(err, asynq.ErrDuplicateTask) {
		t.Fatalf("the same unique task 3.5 s later: %v; want accepted (the lock's TTL is 2 s)", err)
	}
}

// Toggling a tenant's cap leaves nothing behind: after capped, uncapped
// and capped again, new tasks start at once and the cap holds.
func TestCapOffAndOnAgainDoesNotStall(t *testing.T) {
	s := newStack(t, generous)
	c2 := generous
	c2.MaxInFlight = 2
	s.setQuota("t", c2)
	s.startWorker(8, false)
	first := s.enqueue("t", 20, 20*time.Millisecond)
	s.setQuota("t", generous)
	mid := s.enqueue("t", 20, 20*time.Millisecond)
	s.waitRuns(append(first, mid...), 20*time.Second)
	// waitRuns sees a task start: the last ones are still running.
	eventually(t, 5*time.Second, "the uncapped tasks finish", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.running["t"] == 0
	})
	s.setQuota("t", c2)
	s.mu.Lock()
	s.peak["t"] = 0
	s.mu.Unlock()
	start := time.Now()
	last := s.enqueue("t", 20, 20*time.Millisecond)
	s.waitRuns(last, 10*time.Second)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("20 tasks of 20 ms at cap 2 took %v after the cap came back; want no stall", took)
	}
	if p := s.peak["t"]; p > 2 {
		t.Errorf("after the cap came back, %d ran at once; want at most 2", p)
	}
}

// A capped tenant alone keeps its cap's workers busy: a finished task's
// place goes to the next waiting task in the same script that frees it.
func TestCappedTenantAloneKeepsItsCapBusy(t *testing.T) {
	s := newStack(t, generous)
	c4 := generous
	c4.MaxInFlight = 4
	s.setQuota("t", c4)
	s.startWorker(8, false)
	start := time.Now()
	ids := s.enqueue("t", 200, 20*time.Millisecond)
	s.waitRuns(ids, 30*time.Second)
	took := time.Since(start)
	ideal := 200 * 20 * time.Millisecond / 4
	t.Logf("200 tasks of 20 ms at cap 4: %v (ideal %v, %.0f%% of the cap used)", took, ideal, 100*float64(ideal)/float64(took))
	if took > 2*ideal {
		t.Errorf("took %v, over twice the ideal %v: the cap's places sit idle", took, ideal)
	}
	if p := s.peak["t"]; p != 4 {
		t.Errorf("at most %d ran at once; want the cap, 4", p)
	}
}

// A parked asynq.Unique task archived from outside (asynqmon) never goes
// in through the dispatcher; its lock still lasts only its own TTL, so the
// same unique task is accepted again after it.
func TestArchivedParkedUniqueTaskLockLastsItsOwnTTL(t *testing.T) {
	s := newStack(t, capped1)
	s.startWorker(2, false)
	s.put("t", "a", "block")
	eventually(t, 5*time.Second, "a starts", func() bool { return s.ran("a") == 1 })
	ctx := context.Background()
	task := func() *asynq.Task { return asynq.NewTask("unique", []byte("10ms")) }
	info, d, err := s.client.Enqueue(ctx, "t", task(), asynq.Unique(time.Second))
	if err != nil || d.Outcome != admission.Parked {
		t.Fatalf("unique task: %v, %v; want parked", d.Outcome, err)
	}
	if err := s.ins.ArchiveTask("default", info.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, _, err := s.client.Enqueue(ctx, "t", task(), asynq.Unique(time.Second)); errors.Is(err, asynq.ErrDuplicateTask) {
		t.Fatalf("the same unique task 1.5 s after the first was archived while parked: %v; want accepted (the lock's TTL is 1 s)", err)
	}
	s.unblock("a")
}
