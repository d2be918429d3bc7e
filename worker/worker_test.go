package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/goleak"

	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/worker"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// Worker a test starts must be shut down completely.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLimit bounds every wait on the worker. It is generous so that a slow
// CI machine under -race does not flake; a passing run never gets near it.
const waitLimit = 10 * time.Second

// testConfig is a Config for tests: it polls empty queues often, so tests
// don't wait for asynq's one-second idle poll, and logs into the test output.
func testConfig(t testing.TB) worker.Config {
	return worker.Config{
		Concurrency:       4,
		TaskCheckInterval: 20 * time.Millisecond,
		ShutdownTimeout:   2 * time.Second,
		Logger:            slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// env is a Redis server of the test's own with a client to enqueue into it
// and an inspector to look at it.
type env struct {
	redis     asynq.RedisClientOpt
	client    *asynq.Client
	inspector *asynq.Inspector
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := redistest.Start(t)
	opt := asynq.RedisClientOpt{Addr: srv.Addr()}
	e := &env{redis: opt, client: asynq.NewClient(opt), inspector: asynq.NewInspector(opt)}
	t.Cleanup(func() {
		e.client.Close()
		e.inspector.Close()
	})
	return e
}

// start starts a Worker with cfg and h and shuts it down when the test ends.
func (e *env) start(t *testing.T, cfg worker.Config, h asynq.HandlerFunc) *worker.Worker {
	t.Helper()
	w := worker.New(e.redis, cfg)
	if err := w.Start(h); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(w.Shutdown)
	return w
}

func (e *env) enqueue(t *testing.T, task *asynq.Task, opts ...asynq.Option) *asynq.TaskInfo {
	t.Helper()
	info, err := e.client.Enqueue(task, opts...)
	if err != nil {
		t.Fatalf("Enqueue(%s): %v", task.Type(), err)
	}
	return info
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

// receive returns the next value from c, failing the test after waitLimit.
func receive[T any](t *testing.T, what string, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		panic("unreachable")
	}
}

func tenantTask(typ, tenant string) *asynq.Task {
	return asynq.NewTaskWithHeaders(typ, nil, map[string]string{enqueue.TenantHeader: tenant})
}

func TestTenantReachesHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got := make(chan string, 10)
	e.start(t, testConfig(t), func(ctx context.Context, task *asynq.Task) error {
		got <- task.Type() + "=" + worker.Tenant(ctx)
		return nil
	})

	e.enqueue(t, tenantTask("with-tenant", "acme"))
	if g, want := receive(t, "first task", got), "with-tenant=acme"; g != want {
		t.Errorf("handler saw %q, want %q", g, want)
	}
	e.enqueue(t, asynq.NewTask("without-tenant", nil))
	if g, want := receive(t, "second task", got), "without-tenant="; g != want {
		t.Errorf("handler saw %q, want %q", g, want)
	}
}

func TestTenantOutsideWorkerIsEmpty(t *testing.T) {
	if got := worker.Tenant(context.Background()); got != "" {
		t.Errorf("Tenant(context.Background()) = %q, want \"\"", got)
	}
	//lint:ignore SA1012 a nil context is what this checks
	if got := worker.Tenant(nil); got != "" {
		t.Errorf("Tenant(nil) = %q, want \"\"", got)
	}
}

// TestAZeroWorkerStopsQuietly: a Worker not made by New refuses to start,
// with an error, and its Shutdown does nothing (twice), without a panic.
func TestAZeroWorkerStopsQuietly(t *testing.T) {
	var w worker.Worker
	if err := w.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })); err == nil {
		t.Error("a zero Worker started")
	}
	w.Shutdown()
	w.Shutdown()
}

func TestMiddlewareRunsInOrderInsideTenantMiddleware(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var (
		mu    sync.Mutex
		trace []string
	)
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		trace = append(trace, s)
	}
	named := func(name string) asynq.MiddlewareFunc {
		return func(next asynq.Handler) asynq.Handler {
			return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
				record(name + ":" + worker.Tenant(ctx))
				return next.ProcessTask(ctx, task)
			})
		}
	}
	done := make(chan struct{}, 1)
	cfg := testConfig(t)
	cfg.Middleware = []asynq.MiddlewareFunc{named("outer"), named("inner")}
	e.start(t, cfg, func(ctx context.Context, task *asynq.Task) error {
		record("handler:" + worker.Tenant(ctx))
		done <- struct{}{}
		return nil
	})
	e.enqueue(t, tenantTask("t", "acme"))
	receive(t, "handler", done)

	mu.Lock()
	defer mu.Unlock()
	want := []string{"outer:acme", "inner:acme", "handler:acme"}
	if strings.Join(trace, " ") != strings.Join(want, " ") {
		t.Errorf("call order = %q, want %q", trace, want)
	}
}

func TestPanicNamesTenantAndWorkerSurvives(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	type handled struct {
		tenant string
		err    error
	}
	errs := make(chan handled, 10)
	processed := make(chan string, 10)
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.DiscardHandler) // the stack trace is expected
	cfg.ErrorHandler = asynq.ErrorHandlerFunc(func(ctx context.Context, task *asynq.Task, err error) {
		errs <- handled{worker.Tenant(ctx), err}
	})
	e.start(t, cfg, func(ctx context.Context, task *asynq.Task) error {
		if task.Type() == "boom" {
			panic("nil map somewhere")
		}
		processed <- task.Type()
		return nil
	})

	// MaxRetry(0) archives the task, so asynq keeps its last error to inspect.
	info := e.enqueue(t, tenantTask("boom", "acme"), asynq.MaxRetry(0))
	h := receive(t, "error from the panicking task", errs)
	var pe *worker.PanicError
	if !errors.As(h.err, &pe) {
		t.Fatalf("ErrorHandler got %T %v, want a *worker.PanicError", h.err, h.err)
	}
	if pe.Tenant != "acme" || pe.TaskType != "boom" || pe.Value != "nil map somewhere" {
		t.Errorf("PanicError = %+v, want tenant acme, task type boom, value \"nil map somewhere\"", pe)
	}
	if h.tenant != "acme" {
		t.Errorf("Tenant(ctx) in ErrorHandler = %q, want acme", h.tenant)
	}

	var archived *asynq.TaskInfo
	poll(t, "the panicked task to be archived", func() bool {
		ti, err := e.inspector.GetTaskInfo(info.Queue, info.ID)
		archived = ti
		return err == nil && ti.State == asynq.TaskStateArchived
	})
	for _, want := range []string{`"acme"`, `"boom"`, "nil map somewhere"} {
		if !strings.Contains(archived.LastErr, want) {
			t.Errorf("archived task's LastErr = %q, want it to mention %s", archived.LastErr, want)
		}
	}

	e.enqueue(t, tenantTask("next", "acme"))
	if got := receive(t, "the task after the panic", processed); got != "next" {
		t.Errorf("processed %q after the panic, want next", got)
	}
}

func TestPanicWithErrorUnwraps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	errs := make(chan error, 10)
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.ErrorHandler = asynq.ErrorHandlerFunc(func(ctx context.Context, task *asynq.Task, err error) { errs <- err })
	e.start(t, cfg, func(ctx context.Context, task *asynq.Task) error {
		panic(context.DeadlineExceeded)
	})
	e.enqueue(t, tenantTask("t", "acme"), asynq.MaxRetry(0))
	if err := receive(t, "error", errs); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("errors.Is(%v, context.DeadlineExceeded) = false, want true", err)
	}
}

func TestSkipRetryPassesThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(t, testConfig(t), func(ctx context.Context, task *asynq.Task) error {
		return errors.Join(errors.New("bad payload"), asynq.SkipRetry)
	})
	info := e.enqueue(t, tenantTask("t", "acme"))
	poll(t, "the task to be archived without retries", func() bool {
		ti, err := e.inspector.GetTaskInfo(info.Queue, info.ID)
		return err == nil && ti.State == asynq.TaskStateArchived && ti.Retried == 0
	})
}

func TestStartRejectsNilHandler(t *testing.T) {
	w := worker.New(asynq.RedisClientOpt{Addr: "127.0.0.1:1"}, worker.Config{Logger: slog.New(slog.DiscardHandler)})
	defer w.Shutdown()
	if err := w.Start(nil); err == nil {
		t.Error("Start(nil) = nil error, want one")
	}
}

// TestStartShutdownLeaksNoGoroutines runs a Worker through a task and a
// shutdown, and checks every goroutine it started is gone. It is not
// parallel: goleak looks at the whole process.
func TestStartShutdownLeaksNoGoroutines(t *testing.T) {
	e := newEnv(t)
	// Whatever the Redis helper and the client above run is not ours.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	w := worker.New(e.redis, testConfig(t))
	done := make(chan struct{}, 1)
	if err := w.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		done <- struct{}{}
		return nil
	})); err != nil {
		t.Fatalf("Start: %v", err)
	}
	e.enqueue(t, tenantTask("t", "acme"))
	receive(t, "the task", done)
	w.Shutdown()
	w.Shutdown() // idempotent

	if err := w.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })); !errors.Is(err, asynq.ErrServerClosed) {
		t.Errorf("Start after Shutdown = %v, want asynq.ErrServerClosed", err)
	}
}

// TestRunReturnsOnSIGTERM sends SIGTERM to the test process itself. That is
// safe because Run listens for it before it starts the worker, so once a task
// has been handled, the signal goes to Run's channel and not to the runtime's
// default action, which would end the test binary.
func TestRunReturnsOnSIGTERM(t *testing.T) {
	e := newEnv(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	w := worker.New(e.redis, testConfig(t))
	ran := runUntilATask(t, e, w)

	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if err := receive(t, "Run to return after SIGTERM", ran); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if err := w.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })); !errors.Is(err, asynq.ErrServerClosed) {
		t.Errorf("Start after Run returned = %v, want asynq.ErrServerClosed (Run shuts down)", err)
	}
}

// runUntilATask starts w.Run in the background and returns once it has
// processed a task, with the channel Run's result arrives on.
func runUntilATask(t *testing.T, e *env, w *worker.Worker) <-chan error {
	t.Helper()
	handled := make(chan struct{}, 1)
	ran := make(chan error, 1)
	go func() {
		ran <- w.Run(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			handled <- struct{}{}
			return nil
		}))
	}()
	e.enqueue(t, tenantTask("t", "acme"))
	receive(t, "Run to process a task", handled)
	return ran
}

func TestRunReturnsWhenShutDownElsewhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := worker.New(e.redis, testConfig(t))
	ran := runUntilATask(t, e, w)
	w.Shutdown()
	if err := receive(t, "Run to return after Shutdown", ran); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
}

func TestStartRejectsNilRedisConnOpt(t *testing.T) {
	w := worker.New(nil, worker.Config{Logger: slog.New(slog.DiscardHandler)})
	if err := w.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })); err == nil {
		w.Shutdown()
		t.Error("Start with a nil RedisConnOpt = nil error, want one")
	}
}
