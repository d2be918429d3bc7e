package dispatch_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/internal/worktime"
	"github.com/admitq/admitq/worker"
)

// stack is a real redis-server with a gate, a producer and workers on it,
// and a record of every task the workers ran.
type stack struct {
	t      *testing.T
	srv    *redistest.Server
	rdb    *redis.Client
	quotas *admission.RedisQuotas
	gate   *admission.Gate
	client *enqueue.Client
	ins    *asynq.Inspector

	mu      sync.Mutex
	runs    map[string]int           // task ID -> times run
	started []event                  // every start, in order
	running map[string]int           // tenant -> tasks running now
	peak    map[string]int           // tenant -> most running at once
	worked  map[string]time.Duration // tenant -> worker time
	total   atomic.Int64             // tasks running, all tenants
	peakAll atomic.Int64
	wait    map[string][]time.Duration // tenant -> enqueue-to-start waits
	sent    sync.Map                   // task ID -> time.Time of its enqueue
	blocks  sync.Map                   // task ID -> chan struct{}, for "block" tasks
	spans   []worktime.Run
}

// gateFor is the channel a "block" task waits on; unblock closes it.
func (s *stack) gateFor(id string) chan struct{} {
	ch, _ := s.blocks.LoadOrStore(id, make(chan struct{}))
	return ch.(chan struct{})
}

func (s *stack) unblock(id string) { close(s.gateFor(id)) }

// ran returns how many times task id has started.
func (s *stack) ran(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[id]
}

// put enqueues one task of tenant with payload p and ID id, and returns
// the gate's decision.
func (s *stack) put(tenant, id, p string, opts ...asynq.Option) admission.Decision {
	s.t.Helper()
	s.sent.Store(id, time.Now())
	_, d, err := s.client.Enqueue(context.Background(), tenant, asynq.NewTask("work", []byte(p)), append(opts, asynq.TaskID(id))...)
	if err != nil {
		s.t.Fatalf("enqueue %s: %v", id, err)
	}
	return d
}

// eventually fails the test unless cond holds within d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shares returns each tenant's part of the worker time spent in [from, to).
func (s *stack) shares(from, to time.Time) map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	used := worktime.Used(s.spans, from, to)
	var total time.Duration
	for _, d := range used {
		total += d
	}
	out := map[string]float64{}
	for t, d := range used {
		out[t] = float64(d) / float64(total)
	}
	return out
}

type event struct {
	tenant, id string
	at         time.Time // the handler's start
	taken      time.Time // when asynq took the task (see takenAt)
}

// takenAt is when asynq's processor took the task ctx carries, for tasks
// without an asynq.Deadline. Handlers do not start in the order asynq took
// their tasks: its one loop takes a task and starts a goroutine for it, and
// Go may run the last goroutine started first. The deadline that loop sets
// as it takes the task, now plus the task's timeout, keeps the order.
func takenAt(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// inTakenOrder sorts ids by when asynq took them (taken, from takenAt),
// and fails t for one whose take time is unknown (a task with an
// asynq.Deadline), rather than let it pass in the order asked.
func inTakenOrder(t *testing.T, ids []string, taken map[string]time.Time) []string {
	t.Helper()
	for _, id := range ids {
		if taken[id].IsZero() {
			t.Fatalf("task %s ran without a deadline: when asynq took it is unknown", id)
		}
	}
	return slices.SortedStableFunc(slices.Values(ids), func(a, b string) int { return taken[a].Compare(taken[b]) })
}

func newStack(t *testing.T, def admission.Quota) *stack {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	quotas := admission.NewRedisQuotas(rdb, admission.WithRefresh(50*time.Millisecond))
	ctx := context.Background()
	if err := quotas.SetDefault(ctx, def); err != nil {
		t.Fatal(err)
	}
	gate := admission.New(rdb, quotas, admission.WithTimeout(2*time.Second))
	t.Cleanup(func() { gate.Close() })
	s := &stack{
		t: t, srv: srv, rdb: rdb, quotas: quotas, gate: gate,
		client:  enqueue.NewFromRedis(rdb, gate),
		ins:     asynq.NewInspectorFromRedisClient(rdb),
		runs:    map[string]int{},
		running: map[string]int{},
		peak:    map[string]int{},
		worked:  map[string]time.Duration{},
		wait:    map[string][]time.Duration{},
	}
	return s
}

// setQuota sets tenant's quota and waits until the gate reads it.
func (s *stack) setQuota(tenant string, q admission.Quota) {
	s.t.Helper()
	ctx := context.Background()
	if err := s.quotas.Set(ctx, tenant, q); err != nil {
		s.t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := s.gate.Quota(ctx, tenant)
		if err == nil && got == q {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("the gate never read %q's quota %v (has %v, %v)", tenant, q, got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// handler runs a task for the duration its payload names.
func (s *stack) handler() asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		tenant := worker.Tenant(ctx)
		id, _ := asynq.GetTaskID(ctx)
		now := time.Now()
		s.mu.Lock()
		s.runs[id]++
		s.started = append(s.started, event{tenant, id, now, takenAt(ctx)})
		s.running[tenant]++
		s.peak[tenant] = max(s.peak[tenant], s.running[tenant])
		if at, ok := s.sent.Load(id); ok {
			s.wait[tenant] = append(s.wait[tenant], now.Sub(at.(time.Time)))
		}
		s.mu.Unlock()
		n := s.total.Add(1)
		for {
			p := s.peakAll.Load()
			if n <= p || s.peakAll.CompareAndSwap(p, n) {
				break
			}
		}
		if hold, ok := strings.CutPrefix(string(t.Payload()), "throttle:"); ok && s.ran(id) == 1 {
			d, _ := time.ParseDuration(hold)
			s.total.Add(-1)
			s.mu.Lock()
			s.running[tenant]--
			s.mu.Unlock()
			return worker.Throttled(d)
		}
		if string(t.Payload()) == "block" {
			select {
			case <-s.gateFor(id):
			case <-ctx.Done():
				s.total.Add(-1)
				s.mu.Lock()
				s.running[tenant]--
				s.mu.Unlock()
				return ctx.Err()
			}
		} else {
			d, _ := time.ParseDuration(string(t.Payload()))
			time.Sleep(d)
		}
		s.total.Add(-1)
		s.mu.Lock()
		s.running[tenant]--
		s.worked[tenant] += time.Since(now)
		s.spans = append(s.spans, worktime.Run{Tenant: tenant, Start: now, End: time.Now()})
		s.mu.Unlock()
		return nil
	})
}

// startWorker starts a worker with the gate on queue "default".
func (s *stack) startWorker(concurrency int, fair bool) *worker.Worker {
	s.t.Helper()
	return s.startWorkerOn(s.rdb, concurrency, fair)
}

// startWorkerOn starts a worker with the gate on queue "default", whose
// own Redis traffic goes through rdb.
func (s *stack) startWorkerOn(rdb redis.UniversalClient, concurrency int, fair bool) *worker.Worker {
	s.t.Helper()
	w := worker.NewFromRedis(rdb, worker.Config{
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return 0 },
		Concurrency:    concurrency, Gate: s.gate, Fair: fair,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err := w.Start(s.handler()); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(w.Shutdown)
	return w
}

// enqueue enqueues n tasks of tenant that run for d each, and returns
// their IDs, failing the test on any error but a rejection.
func (s *stack) enqueue(tenant string, n int, d time.Duration, opts ...asynq.Option) []string {
	s.t.Helper()
	ids := make([]string, 0, n)
	for i := range n {
		id := fmt.Sprintf("%s-%d-%d", tenant, time.Now().UnixNano(), i)
		s.sent.Store(id, time.Now())
		_, _, err := s.client.Enqueue(context.Background(), tenant,
			asynq.NewTask("work", []byte(d.String())), append(opts, asynq.TaskID(id))...)
		if err != nil {
			s.t.Fatalf("enqueue %s: %v", id, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// waitRuns waits until every id has run, and fails on any run twice.
func (s *stack) waitRuns(ids []string, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		s.mu.Lock()
		left := 0
		for _, id := range ids {
			switch s.runs[id] {
			case 0:
				left++
			case 1:
			default:
				s.mu.Unlock()
				s.t.Fatalf("task %s ran %d times", id, s.runs[id])
			}
		}
		s.mu.Unlock()
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			s.t.Logf("goroutines:\n%s", buf)
			s.t.Fatalf("%d of %d tasks never ran within %v", left, len(ids), within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
