package dispatch_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/dispatch"
)

// A task throttled downstream (worker.Throttled) holds its tenant's waiting
// tasks for as long as it asked, while other tenants' tasks run; then the
// tenant's tasks go in again, the throttled one among them.
func TestThrottledHoldsTheTenant(t *testing.T) {
	s := newStack(t, generous)
	s.startWorker(2, true)
	ctx := context.Background()
	first := "t-throttled"
	s.sent.Store(first, time.Now())
	if _, _, err := s.client.Enqueue(ctx, "t", asynq.NewTask("work", []byte("throttle:1500ms")), asynq.TaskID(first)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the first task runs", func() bool { return s.ran(first) == 1 })
	// The hold is measured from its handler's start, before the worker
	// hands it in: the earliest the 1.5 s can begin. (The moment this
	// goroutine saw it run is later by however long it was kept waiting.)
	var throttled time.Time
	s.mu.Lock()
	for _, e := range s.started {
		if e.id == first {
			throttled = e.at
		}
	}
	s.mu.Unlock()
	eventually(t, 5*time.Second, "the dispatcher holds tenant t", func() bool {
		return s.rdb.ZScore(ctx, "admitq:fair:{default}:sleep", "t").Err() == nil
	})
	held := s.enqueue("t", 5, time.Millisecond)
	qs, err := dispatch.New(s.rdb, s.gate, nil).Stats(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(qs.Tenants, func(ts dispatch.TenantStats) bool { return ts.Tenant == "t" }); i < 0 || !qs.Tenants[i].Held {
		t.Errorf("Stats of a throttled tenant: %+v, want it held", qs.Tenants)
	}
	others := s.enqueue("o", 20, time.Millisecond)
	s.waitRuns(others, 10*time.Second)
	if since := time.Since(throttled); since < time.Second {
		for _, id := range held {
			if s.ran(id) > 0 {
				t.Fatalf("task %s of a throttled tenant ran %v after the throttle, inside its 1.5s", id, since)
			}
		}
	}
	s.waitRuns(held, 10*time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.started {
		if e.tenant == "t" && e.id != first && e.at.Sub(throttled) < 1450*time.Millisecond {
			t.Errorf("task %s of a throttled tenant started %v after the throttle; want the tenant held 1.5s", e.id, e.at.Sub(throttled))
		}
	}
}
