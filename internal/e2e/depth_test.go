package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/worker"
)

// depthWorkerConfig is a worker.Config with the gate for depth tests: it
// polls empty queues every 5ms, so that released tasks are picked up at
// once, and reconciles every 100ms.
func depthWorkerConfig(t *testing.T, s *stack, concurrency int) worker.Config {
	cfg := testWorkerConfig(t, concurrency)
	cfg.Gate = s.gate
	cfg.TaskCheckInterval = 5 * time.Millisecond
	cfg.ReconcileInterval = 100 * time.Millisecond
	return cfg
}

// sampleDepth samples the queue's pending+active tasks every few
// milliseconds until stop is closed, and returns the largest sample.
func sampleDepth(t *testing.T, s *stack, stop <-chan struct{}) <-chan int {
	out := make(chan int, 1)
	go func() {
		most := 0
		for {
			select {
			case <-stop:
				out <- most
				return
			case <-time.After(2 * time.Millisecond):
			}
			qi, err := s.inspector.GetQueueInfo(s.queue)
			if err != nil {
				continue // the queue does not exist yet
			}
			most = max(most, qi.Pending+qi.Active)
		}
	}()
	return out
}

// depthOf returns tenant's permits and parked tasks from Usage.
func depthOf(t *testing.T, s *stack, tenant string) admission.Usage {
	t.Helper()
	u, err := s.gate.Usage(context.Background(), tenant)
	if err != nil {
		t.Fatalf("Usage(%q): %v", tenant, err)
	}
	return u
}

// TestDepthBoundHoldsWhileBacklogDrains enqueues 1,000 tasks of a tenant
// capped at 5 and checks, from asynq's own pending and active counts
// sampled while they drain on 8 workers, that no more than 5 are ever in
// the queue; that every task runs exactly once (nothing lost); and that
// parked tasks start in the order they were enqueued, give or take the
// permits released at once.
func TestDepthBoundHoldsWhileBacklogDrains(t *testing.T) {
	t.Parallel()
	const n, capped = 1000, 5
	q := admission.Quota{Limit: 100_000, Window: time.Second, MaxInFlight: capped}
	s := newStack(t, admission.StaticQuotas{Default: &q})
	ctx := context.Background()

	tasks := make([]*asynq.Task, n)
	for i := range tasks {
		tasks[i] = asynq.NewTask("work", nil, asynq.TaskID(fmt.Sprintf("t%04d", i)))
	}
	rs, err := s.enqueueBatch(ctx, "noisy", tasks)
	if err != nil {
		t.Fatalf("EnqueueBatch: %v", err)
	}
	for i, r := range rs {
		want := admission.Parked
		if i < capped {
			want = admission.Admitted
		}
		if r.Err != nil || r.Decision.Outcome != want {
			t.Fatalf("task %d: %v, %v; want %v", i, r.Decision.Outcome, r.Err, want)
		}
	}
	if u := depthOf(t, s, "noisy"); u.InFlight != capped || u.Parked != n-capped {
		t.Fatalf("after enqueue: in flight %d, parked %d; want %d, %d", u.InFlight, u.Parked, capped, n-capped)
	}

	stop := make(chan struct{})
	most := sampleDepth(t, s, stop)
	rec := newRecorder(n)
	s.startWorker(t, depthWorkerConfig(t, s, 8), rec)
	starts := rec.wait(t)
	s.waitQueueEmpty(t, s.queue)
	close(stop)
	m := <-most
	if m > capped {
		t.Errorf("pending+active reached %d, want at most %d", m, capped)
	}
	t.Logf("drained %d tasks in %v; pending+active at most %d", n, starts[n-1].At.Sub(starts[0].At), m)

	seen := make(map[string]int)
	for _, st := range starts {
		seen[st.ID]++
	}
	for i := range n {
		if id := fmt.Sprintf("t%04d", i); seen[id] != 1 {
			t.Errorf("task %s ran %d times, want 1", id, seen[id])
		}
	}
	// FIFO: a task starts behind at most the permits that were handed
	// out at the same moment.
	for pos, st := range starts {
		var i int
		fmt.Sscanf(st.ID, "t%04d", &i)
		if d := pos - i; d > 2*capped || d < -2*capped {
			t.Errorf("task %s started %dth: out of order by %d", st.ID, pos, d)
		}
	}
	poll(t, "permits given back", func() bool {
		u := depthOf(t, s, "noisy")
		return u.InFlight == 0 && u.Parked == 0
	})
}

var _ = slices.Sort[[]int]
var _ sync.Mutex
var _ atomic.Int64

// poll calls f until it reports done or waitLimit passes.
func poll(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
