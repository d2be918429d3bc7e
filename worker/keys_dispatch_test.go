package worker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/worker"
)

// These tests run concurrency keys, priority and ThrottledKey end to end:
// a producer, a gate and a worker with the gate on one redis-server.

// keyStack is a redis-server with a gate on RedisQuotas, a producer, and a
// record of what the workers ran.
type keyStack struct {
	t      *testing.T
	rdb    *redis.Client
	quotas *admission.RedisQuotas
	gate   *admission.Gate
	client *enqueue.Client

	mu       sync.Mutex
	runs     map[string]int       // task ID -> starts
	order    []string             // task IDs in the order they started
	taken    map[string]time.Time // task ID -> when asynq first took it (see handle)
	startAt  map[string][]time.Time
	running  map[string]int // key -> tasks of it running now
	peak     map[string]int // key -> most running at once
	total    int            // tasks running now
	peakAll  int
	blocks   map[string]chan struct{}
	throttle time.Time // when the first ThrottledKey or Throttled returned
}

func newKeyStack(t *testing.T) *keyStack {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	quotas := admission.NewRedisQuotas(rdb, admission.WithRefresh(50*time.Millisecond))
	if err := quotas.SetDefault(context.Background(), admission.Quota{Limit: admission.NoLimit}); err != nil {
		t.Fatal(err)
	}
	gate := admission.New(rdb, quotas, admission.WithTimeout(2*time.Second))
	t.Cleanup(func() { gate.Close() })
	return &keyStack{
		t: t, rdb: rdb, quotas: quotas, gate: gate, client: enqueue.NewFromRedis(rdb, gate),
		runs: map[string]int{}, taken: map[string]time.Time{}, startAt: map[string][]time.Time{},
		running: map[string]int{}, peak: map[string]int{}, blocks: map[string]chan struct{}{},
	}
}

// setKey sets key's quota and waits until the gate reads it.
func (s *keyStack) setKey(key string, q admission.Quota) {
	s.t.Helper()
	ctx := context.Background()
	if err := s.quotas.SetKey(ctx, key, q); err != nil {
		s.t.Fatal(err)
	}
	poll(s.t, "the gate to read key "+key+"'s quota", func() bool {
		got, ok, err := s.gate.KeyQuota(ctx, key)
		return err == nil && ok && got == q
	})
}

// setTenant sets tenant's quota and waits until the gate reads it.
func (s *keyStack) setTenant(tenant string, q admission.Quota) {
	s.t.Helper()
	ctx := context.Background()
	if err := s.quotas.Set(ctx, tenant, q); err != nil {
		s.t.Fatal(err)
	}
	poll(s.t, "the gate to read "+tenant+"'s quota", func() bool {
		got, err := s.gate.Quota(ctx, tenant)
		return err == nil && got == q
	})
}

// startWorker starts a worker with the gate on queue "default".
func (s *keyStack) startWorker(concurrency int) {
	s.t.Helper()
	w := worker.NewFromRedis(s.rdb, worker.Config{
		Concurrency: concurrency, Gate: s.gate, Fair: true,
		RetryDelayFunc:  func(int, error, *asynq.Task) time.Duration { return 0 },
		ShutdownTimeout: 2 * time.Second,
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err := w.Start(asynq.HandlerFunc(s.handle)); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(w.Shutdown)
}

// gateFor is the channel a "block" task waits on.
func (s *keyStack) gateFor(id string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch, ok := s.blocks[id]
	if !ok {
		ch = make(chan struct{})
		s.blocks[id] = ch
	}
	return ch
}

// handle runs a task by its payload: "block" waits for unblock;
// "throttle-key:<key>:<d>" and "throttle:<d>" return ThrottledKey and
// Throttled on the first run; anything else is a duration to sleep.
//
// Handlers do not start in the order asynq took their tasks: its one loop
// takes a task and starts a goroutine for it, and Go may run the last
// goroutine started first. So handle also notes when asynq took the task,
// from the deadline that loop sets as it does (now plus the task's
// timeout, for a task without an asynq.Deadline).
func (s *keyStack) handle(ctx context.Context, t *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	keys := worker.Keys(ctx)
	taken, _ := ctx.Deadline()
	s.mu.Lock()
	s.runs[id]++
	first := s.runs[id] == 1
	if first {
		s.taken[id] = taken
	}
	s.order = append(s.order, id)
	s.startAt[id] = append(s.startAt[id], time.Now())
	for _, k := range keys {
		s.running[k]++
		s.peak[k] = max(s.peak[k], s.running[k])
	}
	s.total++
	s.peakAll = max(s.peakAll, s.total)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		for _, k := range keys {
			s.running[k]--
		}
		s.total--
		s.mu.Unlock()
	}()
	p := string(t.Payload())
	if rest, ok := strings.CutPrefix(p, "throttle-key:"); ok && first {
		key, d, _ := strings.Cut(rest, ":")
		hold, _ := time.ParseDuration(d)
		s.mu.Lock()
		s.throttle = time.Now()
		s.mu.Unlock()
		return worker.ThrottledKey(key, hold)
	}
	if p == "block" {
		select {
		case <-s.gateFor(id):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	d, _ := time.ParseDuration(p)
	time.Sleep(d)
	return nil
}

// put enqueues a task of tenant with payload p and ID id.
func (s *keyStack) put(tenant, id, p string, opts ...asynq.Option) admission.Decision {
	s.t.Helper()
	_, d, err := s.client.Enqueue(context.Background(), tenant, asynq.NewTask("work", []byte(p)), append(opts, asynq.TaskID(id))...)
	if err != nil {
		s.t.Fatalf("enqueue %s: %v", id, err)
	}
	return d
}

// ran returns how many times id started.
func (s *keyStack) ran(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[id]
}

// waitRuns waits until every id has run, and fails on any run twice.
func (s *keyStack) waitRuns(ids []string, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		s.mu.Lock()
		var left []string
		for _, id := range ids {
			switch s.runs[id] {
			case 0:
				left = append(left, id)
			case 1:
			default:
				s.mu.Unlock()
				s.t.Fatalf("task %s ran %d times", id, s.runs[id])
			}
		}
		s.mu.Unlock()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%d of %d tasks never ran within %v: %v", len(left), len(ids), within, left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A key capped at 2, carried by the tasks of three tenants, never has more
// than 2 of them running, while tasks without the key go on beside them;
// every task runs once. A third tenant's tasks come in one EnqueueBatch.
func TestKeyCapHoldsAcrossTenants(t *testing.T) {
	s := newKeyStack(t)
	s.setKey("api", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 2})
	s.startWorker(8)
	var keyed, keyless []string
	var batch []*asynq.Task
	for i := range 8 {
		for _, tenant := range []string{"a", "b"} {
			id := fmt.Sprintf("%s-api-%d", tenant, i)
			s.put(tenant, id, "30ms", enqueue.Keys("api"))
			keyed = append(keyed, id)
			id = fmt.Sprintf("%s-free-%d", tenant, i)
			s.put(tenant, id, "30ms")
			keyless = append(keyless, id)
		}
		id := fmt.Sprintf("c-api-%d", i)
		batch = append(batch, asynq.NewTask("work", []byte("30ms"), asynq.TaskID(id), enqueue.Keys("api")))
		keyed = append(keyed, id)
		id = fmt.Sprintf("c-free-%d", i)
		batch = append(batch, asynq.NewTask("work", []byte("30ms"), asynq.TaskID(id), enqueue.Keys()))
		keyless = append(keyless, id)
	}
	rs, err := s.client.EnqueueBatch(context.Background(), "c", batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Err != nil {
			t.Fatalf("EnqueueBatch: task %d: %v", i, r.Err)
		}
	}
	s.waitRuns(append(keyed, keyless...), 30*time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.peak["api"] > 2 {
		t.Errorf("%d tasks of key api ran at once, want at most its cap of 2", s.peak["api"])
	}
	if s.peak["api"] < 2 {
		t.Errorf("at most %d task of key api ran at once, want its cap of 2 reached", s.peak["api"])
	}
	if s.peakAll <= 2 {
		t.Errorf("at most %d tasks ran at once on 8 workers, want tasks without the key to run beside the key's", s.peakAll)
	}
	t.Logf("peak: key api %d, all tasks %d", s.peak["api"], s.peakAll)
}

// Among a tenant's waiting tasks the higher priority goes first, first in,
// first out within a priority.
func TestPriorityOrdersATenantsWaitingTasks(t *testing.T) {
	s := newKeyStack(t)
	s.setTenant("t", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
	s.startWorker(4)
	s.put("t", "first", "block")
	poll(t, "the first task to run", func() bool { return s.ran("first") == 1 })
	tasks := []struct {
		id string
		p  int
	}{{"p0-a", 0}, {"p5-a", 5}, {"pm3", -3}, {"p5-b", 5}, {"p10", 10}, {"p0-b", 0}}
	var ids []string
	for _, tc := range tasks {
		if d := s.put("t", tc.id, "1ms", enqueue.Priority(tc.p)); d.Outcome != admission.Parked {
			t.Fatalf("task %s: %s, want parked behind the tenant's cap", tc.id, d.Outcome)
		}
		ids = append(ids, tc.id)
	}
	// The extremes come in a batch, each with its own priority.
	rs, err := s.client.EnqueueBatch(context.Background(), "t", []*asynq.Task{
		asynq.NewTask("work", []byte("1ms"), asynq.TaskID("pmin"), enqueue.Priority(enqueue.MinPriority)),
		asynq.NewTask("work", []byte("1ms"), asynq.TaskID("pmax"), enqueue.Priority(enqueue.MaxPriority)),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Err != nil || r.Decision.Outcome != admission.Parked {
			t.Fatalf("EnqueueBatch: %s, %v; want parked behind the tenant's cap", r.Decision.Outcome, r.Err)
		}
	}
	ids = append(ids, "pmin", "pmax")
	close(s.gateFor("first"))
	s.waitRuns(ids, 10*time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	want := []string{"first", "pmax", "p10", "p5-a", "p5-b", "p0-a", "p0-b", "pm3", "pmin"}
	if !slices.Equal(s.order, want) {
		t.Errorf("ran in the order %v, want %v", s.order, want)
	}
}

// ThrottledKey holds every waiting task that carries the key, whatever its
// tenant, for as long as it asked; tasks without the key, of the same
// tenants, go on meanwhile. (How soon they go on is
// TestTasksBesideAHeldKeyGoInPromptly's.)
func TestThrottledKeyHoldsTheKeyAcrossTenants(t *testing.T) {
	const hold = 3 * time.Second
	s := newKeyStack(t)
	s.startWorker(4)
	s.put("a", "throttled", "throttle-key:api:"+hold.String(), enqueue.Keys("api"))
	poll(t, "the throttled task to run", func() bool { return s.ran("throttled") == 1 })
	// The throttle holds the key once the worker hands it in.
	poll(t, "the dispatcher to hold key api", func() bool {
		return s.rdb.ZScore(context.Background(), "admitq:fair:{default}:ksleep", "api").Err() == nil
	})
	s.mu.Lock()
	throttled := s.throttle
	s.mu.Unlock()
	var held, free []string
	outcomes := map[string]admission.Outcome{}
	for i := range 3 {
		for _, tenant := range []string{"a", "b"} {
			id := fmt.Sprintf("%s-api-%d", tenant, i)
			outcomes[id] = s.put(tenant, id, "1ms", enqueue.Keys("api")).Outcome
			held = append(held, id)
			id = fmt.Sprintf("%s-other-%d", tenant, i)
			outcomes[id] = s.put(tenant, id, "1ms", enqueue.Keys("other")).Outcome
			free = append(free, id)
			id = fmt.Sprintf("%s-free-%d", tenant, i)
			outcomes[id] = s.put(tenant, id, "1ms").Outcome
			free = append(free, id)
		}
	}
	enqueued := time.Now()
	s.waitRuns(free, 10*time.Second)
	s.waitRuns(append(held, "throttled"), 10*time.Second)
	poll(t, "the throttled task to run again", func() bool { return s.ran("throttled") == 2 })
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range append(held, "throttled") {
		at := s.startAt[id][len(s.startAt[id])-1]
		if d := at.Sub(throttled); d < hold-100*time.Millisecond {
			t.Errorf("task %s of the throttled key started %v after the throttle, want the key held %v", id, d, hold)
		}
	}
	for _, id := range free {
		if d := s.startAt[id][0].Sub(enqueued); d > hold-time.Second {
			t.Errorf("task %s without the key (%s) started %v after the last enqueue (%v after the throttle), want it not held with the key",
				id, outcomes[id], d, s.startAt[id][0].Sub(throttled))
		}
	}
}

// ThrottledKey for a key the task does not carry holds nothing: neither
// that key's tasks nor the tenant's; the task itself is retried after d.
func TestThrottledKeyTheTaskDoesNotCarryHoldsNothing(t *testing.T) {
	s := newKeyStack(t)
	s.startWorker(4)
	s.put("a", "throttled", "throttle-key:other:3s", enqueue.Keys("api"))
	poll(t, "the throttled task to run", func() bool { return s.ran("throttled") == 1 })
	s.mu.Lock()
	throttled := s.throttle
	s.mu.Unlock()
	var ids []string
	for i := range 3 {
		for _, tenant := range []string{"a", "b"} {
			for _, key := range []string{"api", "other", ""} {
				id := fmt.Sprintf("%s-%s-%d", tenant, key, i)
				var opts []asynq.Option
				if key != "" {
					opts = append(opts, enqueue.Keys(key))
				}
				s.put(tenant, id, "1ms", opts...)
				ids = append(ids, id)
			}
		}
	}
	s.waitRuns(ids, 10*time.Second)
	poll(t, "the throttled task to run again", func() bool { return s.ran("throttled") == 2 })
	s.mu.Lock()
	defer s.mu.Unlock()
	// A hold of either key or of the tenant would keep some of them to
	// the throttle's 3 s; a second under it leaves room for a stall.
	var last time.Time
	for _, id := range ids {
		if at := s.startAt[id][0]; at.After(last) {
			last = at
		}
	}
	if d := last.Sub(throttled); d > 2*time.Second {
		t.Errorf("the last of the tasks started %v after the throttle, want them not held (3s)", d)
	}
	if d := s.startAt["throttled"][1].Sub(throttled); d < 3*time.Second {
		t.Errorf("the throttled task ran again %v after the throttle, want at least 3s", d)
	}
}

// A paused key holds its tasks, whatever their tenant, from the moment the
// producer reads the pause, while tasks without it run; resumed, its tasks
// go in, each tenant's in order, each once.
func TestPausedKeyHoldsItsTasksUntilResumed(t *testing.T) {
	s := newKeyStack(t)
	s.setKey("api", admission.Quota{Limit: admission.NoLimit, Paused: true})
	s.startWorker(4)
	var held, free []string
	for i := range 3 {
		for _, tenant := range []string{"a", "b"} {
			id := fmt.Sprintf("%s-api-%d", tenant, i)
			if d := s.put(tenant, id, "1ms", enqueue.Keys("api", "db")); d.Outcome != admission.Parked {
				t.Fatalf("task %s of a paused key: %s, want parked", id, d.Outcome)
			}
			held = append(held, id)
			id = fmt.Sprintf("%s-db-%d", tenant, i)
			s.put(tenant, id, "1ms", enqueue.Keys("db"))
			free = append(free, id)
		}
	}
	s.waitRuns(free, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	for _, id := range held {
		if n := s.ran(id); n > 0 {
			t.Fatalf("task %s of a paused key ran", id)
		}
	}
	s.setKey("api", admission.Quota{Limit: admission.NoLimit})
	s.waitRuns(held, 10*time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tenant := range []string{"a", "b"} {
		want := []string{tenant + "-api-0", tenant + "-api-1", tenant + "-api-2"}
		for _, id := range want {
			if s.taken[id].IsZero() {
				t.Fatalf("task %s ran without a deadline: when asynq took it is unknown", id)
			}
		}
		got := slices.SortedStableFunc(slices.Values(want), func(a, b string) int { return s.taken[a].Compare(s.taken[b]) })
		if !slices.Equal(got, want) {
			t.Errorf("tenant %s's tasks of the resumed key were taken in the order %v, want %v", tenant, got, want)
		}
	}
}
