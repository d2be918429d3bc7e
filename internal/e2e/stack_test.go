package e2e

import (
	"context"
	"log/slog"
	"os"
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
	// The outage tests make go-redis log every failed dial; they count the
	// errors themselves.
	redis.SetLogger(quietLogger{})
	if os.Getenv(childEnv) != "" {
		os.Exit(runChildWorker()) // depth_kill_test.go: a worker to SIGKILL
	}
	goleak.VerifyTestMain(m)
}

// quietLogger drops go-redis's log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// waitLimit bounds every wait. Passing runs never get near it; it only
// turns a hang into a failure.
const waitLimit = 20 * time.Second

// stack is a producer's view of one throwaway Redis, a single server or a
// cluster: the enqueue.Client under test and what a test needs to look
// behind it.
type stack struct {
	backend   backend
	queue     string                // the asynq queue tasks go to; see enqueue
	prefix    string                // the gate's key prefix
	rdb       redis.UniversalClient // the gate's connection
	asynqRDB  redis.UniversalClient // asynq's connection; hooks go here
	asynq     *asynq.Client
	gate      *admission.Gate
	client    *enqueue.Client
	inspector *asynq.Inspector
}

// backend is the Redis a stack runs on.
type backend struct {
	name      string
	conn      asynq.RedisConnOpt // what workers connect with
	newClient func(t *testing.T) redis.UniversalClient
	server    *redistest.Server  // nil on a cluster
	cluster   *redistest.Cluster // nil on a single server
}

// serverBackend starts a redis-server for t.
func serverBackend(t *testing.T) backend {
	t.Helper()
	srv := redistest.Start(t)
	return backend{
		name:      "server",
		conn:      asynq.RedisClientOpt{Addr: srv.Addr()},
		newClient: func(t *testing.T) redis.UniversalClient { return srv.Client(t) },
		server:    srv,
	}
}

// clusterBackend runs stacks on cl. Stacks that share a cluster keep apart
// by their queue and prefix (stackConfig).
func clusterBackend(cl *redistest.Cluster) backend {
	return backend{
		name:      "cluster",
		conn:      asynq.RedisClusterClientOpt{Addrs: cl.Addrs()},
		newClient: func(t *testing.T) redis.UniversalClient { return cl.Client(t) },
		cluster:   cl,
	}
}

// stackConfig says how to build a stack; zero fields take the defaults.
type stackConfig struct {
	quotas admission.Quotas
	// gate holds extra gate options. The gate runs with the default
	// timeout, admission.DefaultTimeout, unless one of them sets another.
	gate []admission.Option
	// hooks are added to asynq's connection only.
	hooks []redis.Hook
	// queue is the asynq queue; "" is "default". Stacks that share a
	// cluster each need their own, or their workers take each other's tasks.
	queue string
	// prefix is the gate's key prefix; "" is admitq's default.
	prefix string
	// asynqRDB is asynq's connection; nil means a new client of the backend.
	asynqRDB redis.UniversalClient
	// enqueue configures the enqueue.Client, made by NewFromRedis.
	enqueue []enqueue.Option
	// plain makes the enqueue.Client with New, on an asynq.Client of
	// asynqRDB, instead: it sends asynq's writes as asynq does.
	plain bool
}

// newStack starts a redis-server for t and builds an enqueue.Client on it
// with quotas. hooks are added to asynq's connection only.
func newStack(t *testing.T, quotas admission.Quotas, hooks ...redis.Hook) *stack {
	t.Helper()
	return buildStack(t, serverBackend(t), stackConfig{quotas: quotas, hooks: hooks})
}

// buildStack builds an enqueue.Client on b as cfg says. Everything it makes
// is closed when t ends.
func buildStack(t *testing.T, b backend, cfg stackConfig) *stack {
	t.Helper()
	s := &stack{backend: b, queue: cfg.queue, prefix: cfg.prefix}
	if s.queue == "" {
		s.queue = worker.DefaultQueue
	}
	if s.prefix == "" {
		s.prefix = "admitq"
	}
	s.rdb = b.newClient(t)
	s.asynqRDB = cfg.asynqRDB
	if s.asynqRDB == nil {
		s.asynqRDB = b.newClient(t)
	}
	for _, h := range cfg.hooks {
		s.asynqRDB.AddHook(h)
	}
	s.asynq = asynq.NewClientFromRedisClient(s.asynqRDB)
	s.gate = admission.New(s.rdb, cfg.quotas, append([]admission.Option{admission.WithPrefix(s.prefix)}, cfg.gate...)...)
	t.Cleanup(func() { _ = s.gate.Close() })
	s.client = enqueue.NewFromRedis(s.asynqRDB, s.gate, cfg.enqueue...)
	if cfg.plain {
		s.client = enqueue.New(s.asynq, s.gate, cfg.enqueue...)
	}
	s.inspector = asynq.NewInspectorFromRedisClient(s.rdb)
	return s
}

// enqueue is s.client.Enqueue into the stack's queue.
func (s *stack) enqueue(ctx context.Context, tenant string, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, admission.Decision, error) {
	return s.client.Enqueue(ctx, tenant, task, append(opts, asynq.Queue(s.queue))...)
}

// enqueueBatch is s.client.EnqueueBatch into the stack's queue.
func (s *stack) enqueueBatch(ctx context.Context, tenant string, tasks []*asynq.Task) ([]enqueue.Result, error) {
	return s.client.EnqueueBatch(ctx, tenant, tasks, asynq.Queue(s.queue))
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
	if cfg.Queues == nil {
		cfg.Queues = map[string]int{s.queue: 1}
	}
	w := worker.New(s.backend.conn, cfg)
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
