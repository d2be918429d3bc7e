package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
)

// TestDepthParkedTaskKeepsItsProcessAt: a capped tenant's task enqueued
// with its own asynq.ProcessAt (seconds ahead) while its only place is
// taken is parked, and stays out of the queue (not pending, not run) until
// its time, holding no place: the task parked after it, with no time of
// its own, goes in first. pending+active never passes the cap meanwhile.
func TestDepthParkedTaskKeepsItsProcessAt(t *testing.T) {
	t.Parallel()
	q := admission.Quota{Limit: 1000, Window: time.Second, MaxDelay: time.Minute, MaxInFlight: 1}
	s := newStack(t, admission.StaticQuotas{Default: &q})
	ctx := context.Background()

	running, finishA := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var starts []start
	done := make(chan struct{})
	s.startWorker(t, depthWorkerConfig(t, s, 2), asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		mu.Lock()
		starts = append(starts, start{ID: id, At: time.Now()})
		n := len(starts)
		mu.Unlock()
		switch {
		case id == "a":
			close(running)
			<-finishA
		case n == 3:
			close(done)
		}
		return nil
	}))
	if _, d, err := s.enqueue(ctx, "t", asynq.NewTask("work", nil), asynq.TaskID("a")); err != nil || d.Outcome != admission.Admitted {
		t.Fatalf("Enqueue a: %v, %v; want admitted", d.Outcome, err)
	}
	select {
	case <-running:
	case <-time.After(waitLimit):
		t.Fatal("a never started")
	}

	// A whole second, so that asynq's own rounding (it runs a scheduled
	// task once its clock reaches the second) plays no part.
	at := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	if _, d, err := s.enqueue(ctx, "t", asynq.NewTask("work", nil), asynq.TaskID("b"), asynq.ProcessAt(at)); err != nil || d.Outcome != admission.Parked {
		t.Fatalf("Enqueue b: %v, %v; want parked", d.Outcome, err)
	}
	if _, d, err := s.enqueue(ctx, "t", asynq.NewTask("work", nil), asynq.TaskID("c")); err != nil || d.Outcome != admission.Parked {
		t.Fatalf("Enqueue c: %v, %v; want parked", d.Outcome, err)
	}

	stop := make(chan struct{})
	most := sampleDepth(t, s, stop)
	close(finishA)
	// Until its time, b waits in the scheduled set, and c goes ahead.
	for {
		info, err := s.inspector.GetTaskInfo(s.queue, "b")
		seen := time.Now() // b was in this state at seen or before
		if !seen.Before(at) {
			break
		}
		if err != nil {
			// Gone from asynq: it ran and completed (no retention).
			t.Fatalf("b before its ProcessAt %v: %v", at.Format(time.StampMilli), err)
		}
		if info.State != asynq.TaskStateScheduled {
			t.Fatalf("b is %v %v before its ProcessAt %v", info.State, at.Sub(seen), at.Format(time.StampMilli))
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("b and c did not both run")
	}
	close(stop)
	if m := <-most; m > 1 {
		t.Errorf("pending+active reached %d, want at most 1", m)
	}
	mu.Lock()
	defer mu.Unlock()
	if starts[1].ID != "c" || starts[2].ID != "b" {
		t.Fatalf("ran %s, %s, %s; want a, c (no time of its own), then b at its time", starts[0].ID, starts[1].ID, starts[2].ID)
	}
	if starts[1].At.After(at) {
		t.Errorf("c ran at %v, after b's ProcessAt %v: it waited behind b", starts[1].At.Format(time.StampMilli), at.Format(time.StampMilli))
	}
	if starts[2].At.Before(at) {
		t.Errorf("b ran at %v, before its ProcessAt %v", starts[2].At.Format(time.StampMilli), at.Format(time.StampMilli))
	}
	t.Logf("b ran %v after its ProcessAt", starts[2].At.Sub(at))
	poll(t, "permits given back", func() bool {
		u := depthOf(t, s, "t")
		return u.InFlight == 0 && u.Parked == 0
	})
}
