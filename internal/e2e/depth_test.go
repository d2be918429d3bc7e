package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/worker"
)

// depthWorkerConfig is a worker.Config with the gate for depth tests: it
// polls empty queues every 5ms, so that released tasks are picked up at
// once, and reconciles every 100ms.
func depthWorkerConfig(t *testing.T, s *stack, concurrency int) worker.Config {
	cfg := testWorkerConfig(t, concurrency)
	cfg.Gate = s.gate
	cfg.TaskCheckInterval = 5 * time.Millisecond
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

// depth is a tenant's part of the dispatched queue.
type depth struct{ InFlight, Parked int }

// depthOf returns tenant's tasks in flight and parked in s's queue, as the
// dispatcher counts them.
func depthOf(t *testing.T, s *stack, tenant string) depth {
	t.Helper()
	qs, err := dispatch.New(s.rdb, s.gate, nil).Stats(context.Background(), s.queue)
	if err != nil {
		t.Fatalf("Stats(%q): %v", s.queue, err)
	}
	for _, ts := range qs.Tenants {
		if ts.Tenant == tenant {
			return depth{InFlight: ts.InFlight, Parked: ts.Waiting}
		}
	}
	return depth{}
}

// serve makes s's queue dispatched before any worker runs there, as a
// worker with a gate would, until the test ends: producers then park
// capped tenants' tasks instead of sending them straight in.
func serve(t *testing.T, s *stack) {
	t.Helper()
	srv, err := dispatch.New(s.rdb, s.gate, nil).Serve(dispatch.Worker{Queues: []string{s.queue}, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
}

// TestDepthBoundHoldsWhileBacklogDrains enqueues 1,000 tasks of a tenant
// capped at 5 and checks, from asynq's own pending and active counts
// sampled while they drain on 8 workers, that no more than 5 are ever in
// the queue; that every task runs exactly once (nothing lost); and that
// parked tasks start in the order they were enqueued, give or take the
// permits released at once (see drainBacklog).
func TestDepthBoundHoldsWhileBacklogDrains(t *testing.T) {
	t.Parallel()
	q := admission.Quota{Limit: 100_000, Window: time.Hour, MaxInFlight: 5}
	s := buildStack(t, serverBackend(t), stackConfig{quotas: admission.StaticQuotas{Default: &q}, gate: slowBatch})
	drainBacklog(t, s, "noisy", 1000, 5)
}

// slowBatch gives a gate time for one script call that parks hundreds of
// tasks on a loaded machine, under -race, beside other tests.
var slowBatch = []admission.Option{admission.WithTimeout(3 * time.Second)}

// drainBacklog enqueues n tasks of tenant, capped at capped, in one batch
// on s and checks, while 8 workers drain them, that pending+active never
// passes the cap, that every task runs exactly once, that permits were
// handed out in FIFO order (the order
// of release), and that every permit comes back. q's window must outlast
// the drain: the log is read for the order of the grants.
func drainBacklog(t *testing.T, s *stack, tenant string, n, capped int) {
	ctx := context.Background()
	serve(t, s)
	tasks := make([]*asynq.Task, n)
	for i := range tasks {
		tasks[i] = asynq.NewTask("work", nil, asynq.TaskID(fmt.Sprintf("t%04d", i)))
	}
	rs, err := s.enqueueBatch(ctx, tenant, tasks)
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
	if u := depthOf(t, s, tenant); u.InFlight != capped || u.Parked != n-capped {
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
	// FIFO release: every task took its log slot when it got its permit,
	// so the log, by slot (ties by ID, which sorts like enqueue order),
	// is the order of the grants. The quota's hour-long window keeps it.
	slots, err := s.rdb.ZRangeWithScores(ctx, s.prefix+":{"+tenant+"}:log", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(slots) != n {
		t.Fatalf("the log holds %d entries, want %d", len(slots), n)
	}
	for i, z := range slots {
		if want := fmt.Sprintf("t%04d", i); z.Member != want {
			t.Fatalf("grant %d went to %v, want %s: not in FIFO order", i, z.Member, want)
		}
	}
	poll(t, "permits given back", func() bool {
		u := depthOf(t, s, tenant)
		return u.InFlight == 0 && u.Parked == 0
	})
}

// TestDepthLightTenantStartsWhileNoisyDrains runs a noisy tenant's
// backlog of 300 slow tasks, capped at 2, on 4 workers, while a light
// tenant sends a task every 50ms: every light task must start within a
// second of its enqueue, where without the cap it would wait behind the
// whole backlog.
func TestDepthLightTenantStartsWhileNoisyDrains(t *testing.T) {
	t.Parallel()
	q := admission.Quota{Limit: 100_000, Window: time.Second, MaxInFlight: 2}
	light := q
	light.MaxInFlight = 4
	s := newStack(t, admission.StaticQuotas{Default: &q, Tenants: map[string]admission.Quota{"light": light}})
	serve(t, s)
	ctx := context.Background()
	noisy := make([]*asynq.Task, 300)
	for i := range noisy {
		noisy[i] = asynq.NewTask("slow", nil)
	}
	if _, err := s.enqueueBatch(ctx, "noisy", noisy); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	started := make(map[string]time.Time)
	s.startWorker(t, depthWorkerConfig(t, s, 4), asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		if worker.Tenant(ctx) == "light" {
			id, _ := asynq.GetTaskID(ctx)
			mu.Lock()
			started[id] = time.Now()
			mu.Unlock()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
		return nil
	}))
	enqueued := make(map[string]time.Time)
	for i := range 20 {
		id := fmt.Sprintf("light%d", i)
		enqueued[id] = time.Now()
		// Admitted, or, on a slow machine where its own tasks are slow to
		// hand their permits back, parked behind them: either way it must
		// start soon, as its wait is measured.
		if _, d, err := s.enqueue(ctx, "light", asynq.NewTask("quick", nil), asynq.TaskID(id)); err != nil || d.Outcome == admission.Rejected {
			t.Fatalf("Enqueue %s: %v, %v", id, d.Outcome, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	poll(t, "every light task started", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(started) == 20
	})
	mu.Lock()
	defer mu.Unlock()
	var worst time.Duration
	for id, at := range started {
		worst = max(worst, at.Sub(enqueued[id]))
	}
	t.Logf("light tenant's longest wait: %v", worst)
	if worst > time.Second {
		t.Errorf("a light task waited %v to start, want at most 1s", worst)
	}
	if u := depthOf(t, s, "noisy"); u.Parked == 0 {
		t.Errorf("the noisy backlog was gone before the light tenant finished: the test proved nothing")
	}
}

// TestDepthReleasedTasksKeepTheRate parks tasks of a tenant capped at 2
// with a quota of 2 per 500ms: the released tasks get their slots when
// they are released, so their start times still keep the rate, give or
// take the moment it takes to move a task into the queue.
func TestDepthReleasedTasksKeepTheRate(t *testing.T) {
	t.Parallel()
	const limit, window, n = 2, 500 * time.Millisecond, 10
	q := admission.Quota{Limit: limit, Window: window, MaxDelay: time.Minute, MaxInFlight: 2}
	s := newStack(t, admission.StaticQuotas{Default: &q})
	serve(t, s)
	tasks := make([]*asynq.Task, n)
	for i := range tasks {
		tasks[i] = asynq.NewTask("work", nil, asynq.TaskID(fmt.Sprintf("r%02d", i)))
	}
	// The worker first, so that the admitted tasks start at their slots
	// too: the bound is on slots, and a start lags its slot by the time
	// a worker takes to pick the task up.
	rec := newRecorder(n)
	s.startWorker(t, depthWorkerConfig(t, s, 4), rec)
	rs, err := s.enqueueBatch(context.Background(), "t", tasks)
	if err != nil {
		t.Fatal(err)
	}
	if rs[n-1].Decision.Outcome != admission.Parked {
		t.Fatalf("last task: %v, want parked", rs[n-1].Decision.Outcome)
	}
	starts := rec.wait(t)
	const tolerance = 150 * time.Millisecond
	for i := limit; i < n; i++ {
		if gap := starts[i].At.Sub(starts[i-limit].At); gap < window-tolerance {
			t.Errorf("starts %d and %d are %v apart: %d starts within %v, over the limit %d", i-limit, i, gap, limit+1, window, limit)
		}
	}
	if total := starts[n-1].At.Sub(starts[0].At); total > time.Duration(n/limit)*window+2*time.Second {
		t.Errorf("%d tasks took %v, the rate allows them in %v", n, total, time.Duration(n/limit-1)*window)
	}
}

func TestDepthShutdownKeepsPermit(t *testing.T) {
	t.Parallel()
	q := admission.Quota{Limit: 1000, Window: time.Second, MaxInFlight: 1}
	s := newStack(t, admission.StaticQuotas{Default: &q})
	serve(t, s)
	ctx := context.Background()
	s.enqueue(ctx, "t", asynq.NewTask("long", nil), asynq.TaskID("a"))
	if _, d, err := s.enqueue(ctx, "t", asynq.NewTask("next", nil), asynq.TaskID("b")); err != nil || d.Outcome != admission.Parked {
		t.Fatalf("Enqueue b: %v, %v; want parked", d.Outcome, err)
	}
	running := make(chan struct{}, 1)
	cfg := depthWorkerConfig(t, s, 2)
	cfg.ShutdownTimeout = 200 * time.Millisecond
	cfg.Queues = map[string]int{s.queue: 1}
	w := worker.New(s.backend.conn, cfg)
	if err := w.Start(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		running <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})); err != nil {
		t.Fatal(err)
	}
	<-running
	w.Shutdown()
	info, err := s.inspector.GetTaskInfo(s.queue, "a")
	if err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("a after shutdown: %v, %v; want pending", info, err)
	}
	if u := depthOf(t, s, "t"); u.InFlight != 1 || u.Parked != 1 {
		t.Fatalf("after shutdown: in flight %d, parked %d; want 1, 1", u.InFlight, u.Parked)
	}
	rec := newRecorder(2)
	s.startWorker(t, depthWorkerConfig(t, s, 2), rec)
	starts := rec.wait(t)
	if starts[0].ID != "a" || starts[1].ID != "b" {
		t.Fatalf("starts %q, %q; want a then b", starts[0].ID, starts[1].ID)
	}
}

// TestDepthCapChangeTakesEffect raises a tenant's MaxInFlight from 1 to 4
// and lowers it back, through RedisQuotas, while its backlog drains: the
// queue's depth follows within about a second each way.
func TestDepthCapChangeTakesEffect(t *testing.T) {
	t.Parallel()
	b := serverBackend(t)
	rq := admission.NewRedisQuotas(b.newClient(t), admission.WithRefresh(100*time.Millisecond))
	ctx := context.Background()
	q := admission.Quota{Limit: 100_000, Window: time.Second, MaxInFlight: 1}
	if err := rq.Set(ctx, "t", q); err != nil {
		t.Fatal(err)
	}
	s := buildStack(t, b, stackConfig{quotas: rq})
	serve(t, s)
	tasks := make([]*asynq.Task, 400)
	for i := range tasks {
		tasks[i] = asynq.NewTask("work", nil)
	}
	if _, err := s.enqueueBatch(ctx, "t", tasks); err != nil {
		t.Fatal(err)
	}
	s.startWorker(t, depthWorkerConfig(t, s, 8), asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		time.Sleep(30 * time.Millisecond)
		return nil
	}))
	depthNow := func() int {
		qi, err := s.inspector.GetQueueInfo(s.queue)
		if err != nil {
			t.Fatal(err)
		}
		return qi.Pending + qi.Active
	}
	// until samples the depth until cond holds, and fails after limit.
	until := func(what string, limit time.Duration, cond func(int) bool) time.Duration {
		start := time.Now()
		for !cond(depthNow()) {
			if time.Since(start) > limit {
				t.Fatalf("%s: not within %v", what, limit)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}
	time.Sleep(300 * time.Millisecond)
	if d := depthNow(); d > 1 {
		t.Fatalf("depth %d at cap 1", d)
	}
	q.MaxInFlight = 4
	if err := rq.Set(ctx, "t", q); err != nil {
		t.Fatal(err)
	}
	up := until("depth reaches the raised cap 4", 3*time.Second, func(d int) bool { return d >= 3 })
	q.MaxInFlight = 1
	if err := rq.Set(ctx, "t", q); err != nil {
		t.Fatal(err)
	}
	down := until("depth falls to the lowered cap 1", 3*time.Second, func(d int) bool { return d <= 1 })
	t.Logf("cap raised 1->4: depth followed in %v; lowered 4->1: in %v", up, down)
	if up > 1500*time.Millisecond || down > 1500*time.Millisecond {
		t.Errorf("depth took %v up and %v down to follow the cap, want about a second at most", up, down)
	}
	// and stays there
	stop := make(chan struct{})
	most := sampleDepth(t, s, stop)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	if m := <-most; m > 1 {
		t.Errorf("depth reached %d after the cap was lowered to 1", m)
	}
}

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

// TestDepthRetryKeepsPermitArchiveGivesItBack: a capped tenant's task that
// fails and is retried keeps its permit through the retry, so the parked
// task waits; when it then fails for good (SkipRetry: archived), the permit
// passes to the parked task.
func TestDepthRetryKeepsPermitArchiveGivesItBack(t *testing.T) {
	t.Parallel()
	q := admission.Quota{Limit: 1000, Window: time.Second, MaxInFlight: 1}
	s := newStack(t, admission.StaticQuotas{Default: &q})
	serve(t, s)
	ctx := context.Background()
	s.enqueue(ctx, "t", asynq.NewTask("flaky", nil), asynq.TaskID("a"), asynq.MaxRetry(3))
	if _, d, err := s.enqueue(ctx, "t", asynq.NewTask("next", nil), asynq.TaskID("b")); err != nil || d.Outcome != admission.Parked {
		t.Fatalf("Enqueue b: %v, %v; want parked", d.Outcome, err)
	}
	var mu sync.Mutex
	var order []string
	cfg := depthWorkerConfig(t, s, 2)
	cfg.RetryDelayFunc = func(int, error, *asynq.Task) time.Duration { return 0 }
	cfg.DelayedTaskCheckInterval = 100 * time.Millisecond
	done := make(chan struct{})
	s.startWorker(t, cfg, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		n, _ := asynq.GetRetryCount(ctx)
		mu.Lock()
		order = append(order, fmt.Sprintf("%s%d", id, n))
		mu.Unlock()
		switch {
		case id == "b":
			close(done)
			return nil
		case n == 0:
			return fmt.Errorf("first attempt fails")
		default:
			return fmt.Errorf("give up: %w", asynq.SkipRetry)
		}
	}))
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("b never started")
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := fmt.Sprint(order); diff != "[a0 a1 b0]" {
		t.Fatalf("runs %v, want [a0 a1 b0]: a keeps its permit through its retry and gives it back once archived", order)
	}
	info, err := s.inspector.GetTaskInfo(s.queue, "a")
	if err != nil || info.State != asynq.TaskStateArchived {
		t.Fatalf("a: %v, %v; want archived", info, err)
	}
}
