package dispatch_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/admitq/admitq/dispatch"
)

// A paused tenant's tasks wait, in order, while other tenants' run; its
// running tasks finish; on resume its tasks go in, in order, within about
// a second, with no task of its own to wake the queue.
func TestPausedTenantWaitsAndResumesInOrder(t *testing.T) {
	s := newStack(t, generous)
	s.startWorker(1, true) // one at a time: starts in the order they go in
	paused := generous
	paused.Paused = true
	s.setQuota("p", paused)
	held := s.enqueue("p", 20, time.Millisecond)
	others := s.enqueue("o", 20, time.Millisecond)
	s.waitRuns(others, 20*time.Second)
	time.Sleep(300 * time.Millisecond)
	qs, err := dispatch.New(s.rdb, s.gate, nil).Stats(context.Background(), "default")
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(qs.Tenants, func(ts dispatch.TenantStats) bool { return ts.Tenant == "p" }); i < 0 || !qs.Tenants[i].Paused || qs.Tenants[i].Waiting != len(held) {
		t.Errorf("Stats of a paused tenant with %d waiting: %+v", len(held), qs.Tenants)
	}
	for _, id := range held {
		if n := s.ran(id); n != 0 {
			t.Fatalf("task %s of a paused tenant ran %d times", id, n)
		}
	}
	s.setQuota("p", generous)
	start := time.Now()
	s.waitRuns(held, 20*time.Second)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a resumed tenant's tasks took %v to run; want about a second", d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	taken := map[string]time.Time{}
	for _, e := range s.started {
		if e.tenant == "p" {
			ids = append(ids, e.id)
			if _, ok := taken[e.id]; !ok {
				taken[e.id] = e.taken
			}
		}
	}
	order := inTakenOrder(t, ids, taken)
	for i := range held {
		if i >= len(order) || order[i] != held[i] {
			t.Fatalf("a resumed tenant's tasks were taken in the order %v, want %v", order, held)
		}
	}
}

// Pausing a tenant that has a backlog and runs holds its waiting tasks
// within about a second, with no task of its own to say so.
func TestPauseStopsABacklogGoingIn(t *testing.T) {
	s := newStack(t, generous)
	s.startWorker(2, true)
	ids := s.enqueue("p", 200, 20*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	paused := generous
	paused.Paused = true
	s.setQuota("p", paused)
	time.Sleep(1500 * time.Millisecond) // a sync, and the tasks let in before it
	n := 0
	for _, id := range ids {
		n += s.ran(id)
	}
	time.Sleep(time.Second)
	m := 0
	for _, id := range ids {
		m += s.ran(id)
	}
	if m != n {
		t.Errorf("a paused tenant started %d more tasks in a second after its pause took hold", m-n)
	}
	if n == len(ids) {
		t.Fatalf("all %d tasks ran before the pause: the test proves nothing", n)
	}
	s.setQuota("p", generous)
	s.waitRuns(ids, 30*time.Second)
}
