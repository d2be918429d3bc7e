package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/worker"
)

// After Redis comes back from a snapshot taken between a grant and its
// move, asynq keeps the task parked while the dispatcher counts it in
// flight, with no entry left in its tenant's line. The repair pass puts it
// back in line, so the tenant is not held at its cap for ever: its next
// task runs within seconds, and the rolled-back task runs again.
func TestRollbackToASnapshotDoesNotHoldTheCap(t *testing.T) {
	s := newStack(t, capped1)
	s.startWorker(2, true)
	ctx := context.Background()
	s.put("t", "x", "block")
	eventually(t, 5*time.Second, "x starts", func() bool { return s.ran("x") == 1 })
	if d := s.put("t", "a", "10ms"); d.Outcome != admission.Parked {
		t.Fatalf("a: %v, want parked behind x", d.Outcome)
	}
	taskKey := "asynq:{default}:t:a"
	snapshot, err := s.rdb.Dump(ctx, taskKey).Result()
	if err != nil {
		t.Fatal(err)
	}
	s.unblock("x")
	eventually(t, 5*time.Second, "a runs", func() bool { return s.ran("a") == 1 })
	eventually(t, 5*time.Second, "a's place is free", func() bool {
		return s.rdb.HExists(ctx, "admitq:fair:{default}:run", "a").Val() == false
	})
	// Redis as the snapshot left it after a's finish: asynq keeps a parked,
	// the dispatcher counts it in flight, and no entry waits for it.
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.RestoreReplace(ctx, taskKey, 0, snapshot)
		p.ZAdd(ctx, "asynq:{default}:scheduled", redis.Z{Score: float64(dispatch.ParkedUntil.Unix()), Member: "a"})
		p.HSet(ctx, "admitq:fair:{default}:run", "a", fmt.Sprintf("p|0|%d|t", time.Now().Add(-time.Minute).UnixMicro()))
		p.HSet(ctx, "admitq:fair:{default}:t:t", "n", 1, "cap", 1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := s.put("t", "b", "10ms"); d.Outcome != admission.Parked {
		t.Fatalf("b: %v, want parked: the tenant is at its cap", d.Outcome)
	}
	eventually(t, 8*time.Second, "b runs: the rolled-back task no longer holds the cap", func() bool { return s.ran("b") == 1 })
	eventually(t, 5*time.Second, "a runs again", func() bool { return s.ran("a") == 2 })
}

// A queue stays dispatched for dispatch.DefaultRestartGrace after its last worker
// with a gate left: a capped tenant's tasks park, in order, instead of
// going in uncapped, and a worker that comes back runs them within the cap.
func TestAWorkerRestartDoesNotOpenTheCap(t *testing.T) {
	s := newStack(t, capped1)
	w := s.startWorker(2, true)
	w.Shutdown()
	var ids []string
	for i := range 4 {
		id := fmt.Sprint("r", i)
		if d := s.put("t", id, "20ms"); i > 0 && d.Outcome != admission.Parked {
			t.Fatalf("task %d while no worker runs: %v, want parked (the cap holds across a restart)", i, d.Outcome)
		}
		ids = append(ids, id)
	}
	s.startWorker(2, true)
	s.waitRuns(ids, 10*time.Second)
	if p := s.peak["t"]; p != 1 {
		t.Errorf("capped at 1, the tenant ran %d tasks at once after a restart", p)
	}
}

// A waiting task whose asynq.Deadline passes is archived at its turn, not
// moved in to fail with "context deadline exceeded" and then wait out
// asynq's retries in its tenant's place: the tenant's next task runs.
func TestAnExpiredWaitingTaskIsArchivedAndHoldsNoPlace(t *testing.T) {
	s := newStack(t, capped1)
	s.startWorker(2, true)
	s.put("t", "x", "block")
	eventually(t, 5*time.Second, "x starts", func() bool { return s.ran("x") == 1 })
	if d := s.put("t", "late", "10ms", asynq.Deadline(time.Now().Add(300*time.Millisecond))); d.Outcome != admission.Parked {
		t.Fatalf("late: %v, want parked behind x", d.Outcome)
	}
	if d := s.put("t", "next", "10ms"); d.Outcome != admission.Parked {
		t.Fatalf("next: %v, want parked", d.Outcome)
	}
	time.Sleep(500 * time.Millisecond)
	s.unblock("x")
	eventually(t, 5*time.Second, "the task behind the expired one runs", func() bool { return s.ran("next") == 1 })
	if n := s.ran("late"); n != 0 {
		t.Errorf("the expired task ran %d times", n)
	}
	info, err := s.ins.GetTaskInfo("default", "late")
	if err != nil || info.State != asynq.TaskStateArchived {
		t.Errorf("the expired task: %v, %v; want archived", info, err)
	}
}

// A waiting task run from outside (asynqmon's "run now", Inspector.RunTask)
// counts against its tenant's cap within a repair pass, while the task
// that held the cap still runs: the cap is true again, and the tenant's
// next task waits for both.
func TestATaskRunFromOutsideCountsAgainstTheCap(t *testing.T) {
	s := newStack(t, capped1)
	s.startWorker(4, true)
	s.put("t", "x", "block")
	eventually(t, 5*time.Second, "x starts", func() bool { return s.ran("x") == 1 })
	for _, id := range []string{"a", "b"} {
		if d := s.put("t", id, "block"); d.Outcome != admission.Parked {
			t.Fatalf("%s: %v, want parked", id, d.Outcome)
		}
	}
	if err := s.ins.RunTask("default", "a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a runs from outside", func() bool { return s.ran("a") == 1 })
	eventually(t, 5*time.Second, "a counts against the cap beside x", func() bool {
		n, _ := s.rdb.HGet(context.Background(), "admitq:fair:{default}:t:t", "n").Int()
		return n == 2
	})
	s.unblock("x")
	time.Sleep(time.Second)
	if n := s.ran("b"); n != 0 {
		t.Fatalf("b started while a, run from outside, still runs: the cap of 1 was exceeded")
	}
	s.unblock("a")
	eventually(t, 5*time.Second, "b runs once a ends", func() bool { return s.ran("b") == 1 })
	s.unblock("b")
}

// A plain asynq server on a fair queue shows in Stats as a server without
// a gate, for status, the dashboard and the workers' log to warn of.
func TestStatsCountServersWithoutAGate(t *testing.T) {
	s := newStack(t, capped1)
	s.startWorker(2, true)
	d := dispatch.New(s.rdb, s.gate, nil)
	ctx := context.Background()
	eventually(t, 10*time.Second, "asynq registers the gate worker", func() bool {
		qs, err := d.Stats(ctx, "default")
		return err == nil && qs.Workers == 1 && qs.Ungated == 0 && len(s.rdb.ZRange(ctx, "asynq:servers", 0, -1).Val()) == 1
	})
	plain := asynq.NewServerFromRedisClient(s.rdb, asynq.Config{Concurrency: 2, Queues: map[string]int{"default": 1}})
	if err := plain.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })); err != nil {
		t.Fatal(err)
	}
	defer plain.Shutdown()
	eventually(t, 10*time.Second, "the plain server shows as without a gate", func() bool {
		qs, err := d.Stats(ctx, "default")
		return err == nil && qs.Ungated == 1
	})
}

// A gate worker that stopped without a word (SIGKILL) stays in asynq's
// list of servers for up to 10 s after its own record lapses: Stats does
// not count it as a server without a gate meanwhile. (A plain asynq
// server plays the dead worker's asynq server here.)
func TestALapsedGateWorkerIsNotAServerWithoutAGate(t *testing.T) {
	s := newStack(t, capped1)
	s.startWorker(2, true)
	d := dispatch.New(s.rdb, s.gate, nil)
	ctx := context.Background()
	plain := asynq.NewServerFromRedisClient(s.rdb, asynq.Config{Concurrency: 2, Queues: map[string]int{"default": 1}})
	if err := plain.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })); err != nil {
		t.Fatal(err)
	}
	defer plain.Shutdown()
	eventually(t, 10*time.Second, "asynq lists both servers", func() bool {
		return len(s.rdb.ZRange(ctx, "asynq:servers", 0, -1).Val()) == 2
	})
	for _, c := range []struct {
		lapsed  time.Duration
		ungated int
	}{{2 * time.Second, 0}, {11 * time.Second, 1}} {
		dead := redis.Z{Score: float64(time.Now().Add(-c.lapsed).UnixMicro()), Member: "dead|2|1"}
		if err := s.rdb.ZAdd(ctx, "admitq:fair:{default}:workers", dead).Err(); err != nil {
			t.Fatal(err)
		}
		qs, err := d.Stats(ctx, "default")
		if err != nil || qs.Workers != 1 || qs.Ungated != c.ungated {
			t.Errorf("a gate worker's record lapsed %v ago: %d workers, %d servers without a gate (%v); want 1 and %d", c.lapsed, qs.Workers, qs.Ungated, err, c.ungated)
		}
	}
}

// A worker's own restart grace: one of a second holds the queue
// dispatched for that second after it stops, and then tasks go in
// straight; a negative one not at all.
func TestAWorkersRestartGraceIsItsOwn(t *testing.T) {
	for _, c := range []struct {
		grace   time.Duration
		parked  bool // a capped tenant's second task just after the stop
		wait    time.Duration
		parked2 bool // and after wait
	}{
		{time.Second, true, 1500 * time.Millisecond, false},
		{-1, false, 0, false},
	} {
		s := newStack(t, capped1)
		w := worker.NewFromRedis(s.rdb, worker.Config{Concurrency: 2, Gate: s.gate, Fair: true, RestartGrace: c.grace})
		if err := w.Start(s.handler()); err != nil {
			t.Fatal(err)
		}
		w.Shutdown()
		s.put("t", fmt.Sprint("a", c.grace), "1s")
		if d := s.put("t", fmt.Sprint("b", c.grace), "10ms"); (d.Outcome == admission.Parked) != c.parked {
			t.Errorf("grace %v, just after the stop: %v, want parked %v", c.grace, d.Outcome, c.parked)
		}
		time.Sleep(c.wait + 1100*time.Millisecond) // and the producer's view of the queue, a second old at most
		if d := s.put("t", fmt.Sprint("c", c.grace), "10ms"); (d.Outcome == admission.Parked) != c.parked2 {
			t.Errorf("grace %v, %v after the stop: %v, want parked %v", c.grace, c.wait, d.Outcome, c.parked2)
		}
	}
}

// A waiting task with an asynq.Deadline that an operator runs from
// outside, counted against its tenant's cap at its turn, and whose
// deadline then passes before a worker takes it, fails into asynq's retry
// set: the repair pass archives it there and frees its place, which its
// retries would otherwise hold for their whole backoff. (The dispatcher
// forgot its deadline once it counted it: the tenant stood still.)
func TestARunNowTaskPastItsDeadlineFreesItsPlace(t *testing.T) {
	s := newStack(t, capped1)
	s.setQuota("f", admission.Quota{Limit: admission.NoLimit})
	s.setQuota("t", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1, Paused: true})
	s.startWorker(2, true)
	s.put("f", "f1", "block")
	s.put("f", "f2", "block")
	eventually(t, 5*time.Second, "f's tasks hold both workers", func() bool { return s.ran("f1") == 1 && s.ran("f2") == 1 })
	if d := s.put("t", "late", "10ms", asynq.Deadline(time.Now().Add(2*time.Second))); d.Outcome != admission.Parked {
		t.Fatalf("late: %v, want parked (t is paused)", d.Outcome)
	}
	if err := s.ins.RunTask("default", "late"); err != nil {
		t.Fatal(err)
	}
	s.setQuota("t", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1}) // t's turn counts late
	eventually(t, 5*time.Second, "late counts against t's cap", func() bool {
		n, _ := s.rdb.HGet(context.Background(), "admitq:fair:{default}:t:t", "n").Int()
		return n == 1
	})
	time.Sleep(2500 * time.Millisecond) // late's deadline passes while it is pending
	if d := s.put("t", "after", "10ms"); d.Outcome != admission.Parked {
		t.Fatalf("after: %v, want parked behind late", d.Outcome)
	}
	s.unblock("f1")
	s.unblock("f2")
	eventually(t, 8*time.Second, "after runs: late, overdue in the retry set, no longer holds t's place", func() bool { return s.ran("after") == 1 })
	if info, err := s.ins.GetTaskInfo("default", "late"); err != nil || info.State != asynq.TaskStateArchived {
		t.Errorf("late: %v, %v; want archived", info, err)
	}
}

// A task the dispatcher archived past its asynq.Deadline and an operator
// then runs again from asynq's archive is counted against its tenant's
// cap with its deadline (fair_adopt.lua): failing into the retry set, it
// is archived again and frees its place.
func TestAnArchivedTaskRunAgainPastItsDeadlineFreesItsPlace(t *testing.T) {
	s := newStack(t, capped1)
	s.setQuota("f", admission.Quota{Limit: admission.NoLimit})
	s.setQuota("t", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
	s.startWorker(2, true)
	s.put("t", "x", "block")
	eventually(t, 5*time.Second, "x holds t's cap", func() bool { return s.ran("x") == 1 })
	if d := s.put("t", "late", "10ms", asynq.Deadline(time.Now().Add(time.Second))); d.Outcome != admission.Parked {
		t.Fatalf("late: %v, want parked behind x", d.Outcome)
	}
	time.Sleep(1500 * time.Millisecond)
	s.put("f", "f1", "block") // with x, both workers are held
	eventually(t, 5*time.Second, "f1 runs", func() bool { return s.ran("f1") == 1 })
	s.unblock("x") // t's turn: late, past its deadline, is archived
	eventually(t, 5*time.Second, "late is archived at its turn", func() bool {
		info, err := s.ins.GetTaskInfo("default", "late")
		return err == nil && info.State == asynq.TaskStateArchived
	})
	s.put("f", "f2", "block")
	eventually(t, 5*time.Second, "f's tasks hold both workers", func() bool { return s.ran("f2") == 1 })
	if err := s.ins.RunTask("default", "late"); err != nil { // asynqmon's "run" on an archived task
		t.Fatal(err)
	}
	eventually(t, 8*time.Second, "late, pending, counts against t's cap", func() bool {
		n, _ := s.rdb.HGet(context.Background(), "admitq:fair:{default}:t:t", "n").Int()
		return n == 1
	})
	if d := s.put("t", "after", "10ms"); d.Outcome != admission.Parked {
		t.Fatalf("after: %v, want parked behind late", d.Outcome)
	}
	s.unblock("f1")
	s.unblock("f2")
	eventually(t, 8*time.Second, "after runs: late, overdue in the retry set, no longer holds t's place", func() bool { return s.ran("after") == 1 })
}

// A parked task an operator deletes leaves its waiting entry behind, in
// its tenant's line or, once its turn found the task missing, in limbo.
// Its ID enqueued again, by a paused tenant here, is a new task with an
// entry of its own: the old entry, stale, lets nothing in at its turn (it
// let the new task in under the old tenant, past the pause), and the new
// task runs once its own tenant is resumed, once.
func TestAStaleEntryOfAReusedIDLetsNothingIn(t *testing.T) {
	for _, where := range []string{"line", "limbo"} {
		t.Run(where, func(t *testing.T) {
			s := newStack(t, capped1)
			ctx := context.Background()
			parkAndDelete(t, s)
			if where == "limbo" {
				s.unblock("x") // a's turn finds its task missing: limbo
				eventually(t, 5*time.Second, "a's entry is in limbo", func() bool {
					return s.rdb.ZCard(ctx, "admitq:fair:{default}:limbo").Val() == 1
				})
			}
			if d := s.put("u", "a", "10ms"); d.Outcome != admission.Parked {
				t.Fatalf("a again, for paused u: %v, want parked", d.Outcome)
			}
			if where == "line" {
				s.unblock("x") // t's turn meets a's old entry
			}
			time.Sleep(3 * time.Second)
			if n := s.ran("a"); n != 0 {
				t.Fatalf("a, enqueued again for paused tenant u, ran %d times: the stale entry let it in", n)
			}
			s.setQuota("u", admission.Quota{Limit: admission.NoLimit})
			eventually(t, 5*time.Second, "a runs once u is resumed", func() bool { return s.ran("a") == 1 })
			time.Sleep(500 * time.Millisecond)
			if n := s.ran("a"); n != 1 {
				t.Errorf("a ran %d times, want once", n)
			}
			eventually(t, 5*time.Second, "a's record in own goes with it", func() bool {
				return s.rdb.Exists(ctx, "admitq:fair:{default}:own").Val() == 0
			})
		})
	}
}

// A task asynq lists active whose lease ran out, which no worker runs (its
// worker was killed, or Redis came back from a snapshot taken while it
// ran), frees its tenant's place at the next repair pass: asynq's
// recoverer retries it 30 s to a minute and a half later, and until then
// the tenant stood still. It does not count again until it runs again.
func TestAnActiveTaskWhoseLeaseRanOutFreesItsPlace(t *testing.T) {
	s := newStack(t, capped1)
	ctx := context.Background()
	// No gate worker yet: x goes straight to asynq, and is made an orphan
	// by hand, as a snapshot would leave it.
	s.put("t", "x", "10ms")
	since := time.Now().Add(-time.Minute).UnixMicro()
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.LRem(ctx, "asynq:{default}:pending", 0, "x")
		p.LPush(ctx, "asynq:{default}:active", "x")
		p.HSet(ctx, "asynq:{default}:t:x", "state", "active")
		p.ZAdd(ctx, "asynq:{default}:lease", redis.Z{Score: float64(time.Now().Add(-15 * time.Second).Unix()), Member: "x"})
		p.HSet(ctx, "admitq:fair:{default}:run", "x", fmt.Sprintf("p|0|%d|t", since))
		p.HSet(ctx, "admitq:fair:{default}:t:t", "n", 1, "cap", 1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.startWorker(2, true)
	time.Sleep(1100 * time.Millisecond) // producers see the worker
	if d := s.put("t", "b", "10ms"); d.Outcome != admission.Parked {
		t.Fatalf("b: %v, want parked: x holds t's cap", d.Outcome)
	}
	eventually(t, 8*time.Second, "b runs: x, whose lease ran out, no longer holds t's place", func() bool { return s.ran("b") == 1 })
	if d := s.put("t", "c", "10ms"); d.Outcome == admission.Parked {
		eventually(t, 5*time.Second, "c runs: x is not counted again while asynq lists it active", func() bool { return s.ran("c") == 1 })
	}
	if n := s.ran("x"); n != 0 {
		t.Errorf("x ran %d times; asynq's recoverer retries it in its own time", n)
	}
}

// parkAndDelete pauses tenant u, serves the queue, holds t's cap of 1
// with x (which blocks), parks t's task a behind it and deletes a as an
// operator would: its entry stays in t's line.
func parkAndDelete(t *testing.T, s *stack) {
	t.Helper()
	s.setQuota("u", admission.Quota{Limit: admission.NoLimit, Paused: true})
	s.startWorker(4, true)
	s.put("t", "x", "block")
	eventually(t, 5*time.Second, "x holds t's cap", func() bool { return s.ran("x") == 1 })
	if d := s.put("t", "a", "10ms"); d.Outcome != admission.Parked {
		t.Fatalf("a: %v, want parked behind x", d.Outcome)
	}
	if err := s.ins.DeleteTask("default", "a"); err != nil {
		t.Fatal(err)
	}
}
