package e2e

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/worker"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// worker, client and server a test starts must be gone when it ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLimit bounds every wait. Passing runs never get near it; it only
// turns a hang into a failure.
const waitLimit = 20 * time.Second

// stack is a producer's view of one throwaway Redis: the enqueue.Client
// under test and what a test needs to look behind it.
type stack struct {
	conn      asynq.RedisClientOpt
	rdb       *redis.Client // the gate's connection
	asynqRDB  *redis.Client // asynq's connection; hooks go here
	asynq     *asynq.Client
	gate      *admission.Gate
	client    *enqueue.Client
	inspector *asynq.Inspector
}

// newStack starts a redis-server for t and builds an enqueue.Client on it
// with quotas. hooks are added to asynq's connection only.
func newStack(t *testing.T, quotas admission.Quotas, hooks ...redis.Hook) *stack {
	t.Helper()
	srv := redistest.Start(t)
	s := &stack{
		conn:     asynq.RedisClientOpt{Addr: srv.Addr()},
		rdb:      srv.Client(t),
		asynqRDB: srv.Client(t),
	}
	for _, h := range hooks {
		s.asynqRDB.AddHook(h)
	}
	s.asynq = asynq.NewClientFromRedisClient(s.asynqRDB)
	// The default 250ms deadline is for production. Here the tests of two
	// CPUs' worth of packages run under -race at once, and one round trip
	// that misses the deadline with three producers waiting on it opens the
	// gate's breaker, which then refuses every call until its probe passes.
	s.gate = admission.New(s.rdb, quotas, admission.WithTimeout(5*time.Second))
	t.Cleanup(func() { _ = s.gate.Close() })
	s.client = enqueue.New(s.asynq, s.gate)
	s.inspector = asynq.NewInspectorFromRedisClient(s.rdb)
	return s
}

// testWorkerConfig is a worker.Config for tests. It keeps the worker's
// one-second check for deferred tasks, the scheduling under test, but polls
// empty queues every 50ms instead of every second, so the measured delays
// are the scheduler's and not the idle poll's.
func testWorkerConfig(t *testing.T, concurrency int) worker.Config {
	return worker.Config{
		Concurrency:       concurrency,
		TaskCheckInterval: 50 * time.Millisecond,
		ShutdownTimeout:   2 * time.Second,
		Logger:            slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// startWorker runs a worker.Worker with cfg and h until the test ends.
func (s *stack) startWorker(t *testing.T, cfg worker.Config, h asynq.Handler) {
	t.Helper()
	w := worker.New(s.conn, cfg)
	if err := w.Start(h); err != nil {
		t.Fatalf("worker Start: %v", err)
	}
	t.Cleanup(w.Shutdown)
}

// entries returns how many entries tenant's log holds, in the window and
// reserved ahead.
func (s *stack) entries(t *testing.T, tenant string) int {
	t.Helper()
	u, err := s.gate.Usage(context.Background(), tenant)
	if err != nil {
		t.Fatalf("Usage(%q): %v", tenant, err)
	}
	return u.InWindow + u.Reserved
}

// queued returns the IDs of the tasks waiting in queue, pending or
// scheduled. A queue asynq has never seen is empty.
func (s *stack) queued(t *testing.T, queue string) map[string]bool {
	t.Helper()
	ids := make(map[string]bool)
	if qs, err := s.inspector.Queues(); err != nil {
		t.Fatalf("Queues: %v", err)
	} else if !slices.Contains(qs, queue) {
		return ids
	}
	for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
		s.inspector.ListPendingTasks, s.inspector.ListScheduledTasks,
	} {
		tis, err := list(queue, asynq.PageSize(1000))
		if err != nil {
			t.Fatalf("listing %q: %v", queue, err)
		}
		for _, ti := range tis {
			ids[ti.ID] = true
		}
	}
	return ids
}

// waitQueueEmpty waits until queue holds no task in any state but
// completed, so that nothing is left to run.
func (s *stack) waitQueueEmpty(t *testing.T, queue string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		qi, err := s.inspector.GetQueueInfo(queue)
		if err != nil {
			t.Fatalf("GetQueueInfo: %v", err)
		}
		left := qi.Pending + qi.Active + qi.Scheduled + qi.Retry + qi.Archived + qi.Aggregating
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %q still holds %d tasks after %v: %+v", queue, left, waitLimit, qi)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// start is one run of a handler.
type start struct {
	ID      string
	Tenant  string // worker.Tenant(ctx)
	At      time.Time
	Headers map[string]string
}

// recorder is a handler that records every start and signals once it has
// seen want of them.
type recorder struct {
	mu     sync.Mutex
	starts []start
	want   int
	seen   atomic.Int64
	done   chan struct{}
}

func newRecorder(want int) *recorder {
	return &recorder{want: want, done: make(chan struct{})}
}

func (r *recorder) ProcessTask(ctx context.Context, t *asynq.Task) error {
	now := time.Now()
	id, _ := asynq.GetTaskID(ctx)
	r.mu.Lock()
	r.starts = append(r.starts, start{ID: id, Tenant: worker.Tenant(ctx), At: now, Headers: t.Headers()})
	r.mu.Unlock()
	if r.seen.Add(1) == int64(r.want) {
		close(r.done)
	}
	return nil
}

// wait waits until the handler has started want times and returns every
// start so far.
func (r *recorder) wait(t *testing.T) []start {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(waitLimit):
		t.Fatalf("the handler ran %d times in %v, want %d", r.seen.Load(), waitLimit, r.want)
	}
	return r.snapshot()
}

func (r *recorder) snapshot() []start {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]start(nil), r.starts...)
}

// cancelHook is a go-redis hook that, once armed, cancels a context just
// before the next command, so that the command fails exactly as a caller's
// cancellation makes it fail.
type cancelHook struct {
	cancel atomic.Pointer[context.CancelFunc]
}

func (h *cancelHook) arm(cancel context.CancelFunc) { h.cancel.Store(&cancel) }

func (h *cancelHook) fire() {
	if c := h.cancel.Swap(nil); c != nil {
		(*c)()
	}
}

func (h *cancelHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cancelHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.fire()
		return next(ctx, cmd)
	}
}

func (h *cancelHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.fire()
		return next(ctx, cmds)
	}
}
