package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/lua"
)

// Defaults the Worker applies to zero Config fields.
const (
	// DefaultDelayedTaskCheckInterval is how often scheduled and retry tasks
	// are promoted when Config.DelayedTaskCheckInterval is zero. asynq's own
	// default is 5 s; admitq's producers schedule deferred tasks on whole-second
	// slots, and a 5 s poll would turn a slot into a 0–5 s window.
	DefaultDelayedTaskCheckInterval = time.Second

	// DefaultTaskCheckInterval is how long an idle processor waits (on
	// average) before polling empty queues again, when
	// Config.TaskCheckInterval is zero. It is asynq's default.
	DefaultTaskCheckInterval = time.Second

	// DefaultShutdownTimeout is how long Shutdown lets running handlers finish
	// when Config.ShutdownTimeout is zero. It is asynq's default.
	DefaultShutdownTimeout = 8 * time.Second

	// DefaultQueue is the queue processed when Config.Queues has no queue with
	// a positive weight.
	DefaultQueue = "default"

	// DefaultDispatchTaskCheckInterval is the TaskCheckInterval of a worker
	// with a Gate when Config.TaskCheckInterval is zero.
	DefaultDispatchTaskCheckInterval = 10 * time.Millisecond
)

// startCheckTimeout bounds Start's check of the server.
const startCheckTimeout = 5 * time.Second

// Config configures a Worker. The zero value is usable: it processes the
// "default" queue with one goroutine per CPU and logs to slog.Default().
type Config struct {
	// Concurrency is the maximum number of tasks handled at once.
	// Zero or negative means runtime.NumCPU().
	Concurrency int

	// Queues maps queue names to weights. With several non-empty queues a
	// queue is picked in proportion to its weight, unless StrictPriority is
	// set. Queues with a weight ≤ 0 are ignored.
	// Nil or empty means {"default": 1}.
	Queues map[string]int

	// StrictPriority makes higher-weight queues drain completely before
	// lower ones are looked at. False (the zero value) means weighted random
	// choice, which never starves a queue.
	StrictPriority bool

	// ShutdownTimeout is how long Shutdown waits for running handlers before
	// it gives up on them and puts their tasks back in the queue.
	// Zero or negative means DefaultShutdownTimeout (8 s).
	ShutdownTimeout time.Duration

	// DelayedTaskCheckInterval is how often deferred (scheduled) and retry
	// tasks whose time has come are moved to their queue. It bounds how late
	// after its slot a deferred task starts.
	// Zero or negative means DefaultDelayedTaskCheckInterval (1 s).
	DelayedTaskCheckInterval time.Duration

	// TaskCheckInterval is how long, on average, an idle worker waits before
	// it polls empty queues again. Lower values pick up new work sooner and
	// cost Redis more. Zero or negative means DefaultTaskCheckInterval (1 s),
	// or DefaultDispatchTaskCheckInterval (10 ms) when Gate is set. A worker
	// with a Gate on one queue that finds it empty while the dispatcher
	// expects to move tasks in looks again as soon as it has, or after
	// TaskCheckInterval, rather than sleeping: a task the dispatcher moves in
	// starts at once.
	TaskCheckInterval time.Duration

	// Middleware wraps the handler. The first element is the outermost.
	// They run inside the Worker's own middleware, so Tenant(ctx) works in
	// them and a panic in them is recovered like a panic in the handler.
	// Nil means none.
	Middleware []asynq.MiddlewareFunc

	// IsFailure decides whether an error returned by the handler counts as a
	// failure: a failure increments the task's retry count and the queue's
	// processed and failed counters; a non-failure touches none of them. It is
	// never called for a *ThrottledError, which is never a failure.
	// Nil means every non-nil error is a failure.
	IsFailure func(error) bool

	// RetryDelayFunc computes how long a failed task waits before its next
	// attempt. It is never called for a *ThrottledError, which waits for its
	// RetryAfter. Nil means asynq.DefaultRetryDelayFunc (exponential backoff).
	RetryDelayFunc asynq.RetryDelayFunc

	// ErrorHandler is called for every non-nil error the handler returns,
	// including *ThrottledError and *PanicError; use errors.As to tell them
	// apart. Tenant(ctx) works in it. Nil means errors are not reported
	// beyond asynq's own bookkeeping.
	ErrorHandler asynq.ErrorHandler

	// Gate, when set, makes the Worker serve its queues for the
	// dispatcher (package dispatch): capped tenants' tasks (Quota.MaxInFlight)
	// wait their turn there and go in as the tenant's own tasks finish, and
	// producers (enqueue.Client on a gate with the same prefix) see within a
	// second that a worker with a gate serves the queue. Use the Gate, or one
	// with the same prefix and quotas, that the producers use, on the same
	// Redis. Nil means no dispatch: producers then enqueue capped tenants'
	// tasks uncapped and log that once.
	Gate *admission.Gate

	// Fair, with Gate, makes the Worker's queues fair: tenants share the
	// workers' time by Quota.Weight (0 means 1), work-conserving, and a
	// queue holds at most its gate workers' total concurrency and half as
	// much again of tasks, the rest waiting durably in order of their
	// tenants' virtual time. Fair without Gate is an error from Start.
	Fair bool

	// OnDispatch, when set with Gate, receives the dispatch state of each
	// of the Worker's queues every couple of seconds (dispatch.Stats: per
	// tenant waiting, in flight, worker time against weight), for gauges
	// such as metrics.ObserveDispatch. It must not block. Nil means none.
	OnDispatch func(dispatch.QueueStats)

	// RestartGrace, with Gate, is how long the Worker's queues stay
	// dispatched after it stops or its heartbeat lapses: producers keep
	// parking capped, paused and fair tasks meanwhile, so that a restart of
	// a one-worker deployment does not open the caps. 0 means
	// dispatch.DefaultRestartGrace (30 s); a negative value means none.
	RestartGrace time.Duration

	// Logger receives asynq's log lines (with component=asynq) and a line
	// with the stack for each recovered panic. Nil means slog.Default(), read
	// once by New: a worker that hid its Redis errors would be hard to
	// debug. Pass slog.New(slog.DiscardHandler) for silence.
	Logger *slog.Logger
}

// A Worker runs an asynq server whose handler knows each task's tenant
// (see Tenant), turns panics into errors that name the tenant, and retries
// throttled tasks without counting a failure (see Throttled).
//
// Create one with New. A Worker runs once, from Start or Run until Shutdown,
// and cannot be restarted. Its methods are safe for concurrent use.
type Worker struct {
	redis   asynq.RedisConnOpt
	cfg     asynq.Config
	log     *slog.Logger
	mw      []asynq.MiddlewareFunc
	gate    *admission.Gate
	fair    bool
	observe func(dispatch.QueueStats)
	grace   time.Duration // Config.RestartGrace
	// client is the caller's Redis client (NewFromRedis), which the Worker
	// uses and does not close; nil for New.
	client redis.UniversalClient

	mu     sync.Mutex
	srv    *asynq.Server         // nil until Start
	disp   *dispatch.Server      // nil unless Config.Gate; closed by Shutdown
	rdb    redis.UniversalClient // nil until Start; closed by Shutdown unless the caller's
	closed bool                  // Shutdown has been called
	done   chan struct{}         // closed when Shutdown has finished
	// stopping is set by Stop and Shutdown: asynq's looks into an empty
	// queue stop waiting for the dispatcher (handOff).
	stopping atomic.Bool
	// ahead answers asynq's looks with a Gate (takeAhead); nil without.
	ahead *takeAhead
	// stopSweep ends ahead's sweeper, which closes swept when it has.
	stopSweep, swept chan struct{}
}

// New returns a Worker that will process tasks from the Redis server r
// points at, configured by cfg. It neither connects nor starts anything, so a
// Worker that is never started needs no Shutdown.
func New(r asynq.RedisConnOpt, cfg Config) *Worker {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Worker{
		redis:   r,
		cfg:     cfg.asynqConfig(log),
		log:     log,
		mw:      slices.Clone(cfg.Middleware),
		gate:    cfg.Gate,
		fair:    cfg.Fair,
		observe: cfg.OnDispatch,
		grace:   cfg.RestartGrace,
		done:    make(chan struct{}),
	}
}

// NewFromRedis is New on rdb, the go-redis client that the gate and
// enqueue.NewFromRedis use too (asynq.NewServerFromRedisClient): one
// connection setting for the whole program. The caller owns rdb and closes
// it after Shutdown.
func NewFromRedis(rdb redis.UniversalClient, cfg Config) *Worker {
	w := New(nil, cfg)
	w.client = rdb
	return w
}

// asynqConfig maps cfg to the asynq.Config it runs with, defaults applied.
// Defaults are spelled out here, not left to asynq, so that they are the
// documented ones whatever asynq's defaults become.
func (cfg Config) asynqConfig(log *slog.Logger) asynq.Config {
	c := asynq.Config{
		Concurrency:              cfg.Concurrency,
		Queues:                   maps.Clone(cfg.Queues),
		StrictPriority:           cfg.StrictPriority,
		ShutdownTimeout:          cfg.ShutdownTimeout,
		DelayedTaskCheckInterval: cfg.DelayedTaskCheckInterval,
		TaskCheckInterval:        cfg.TaskCheckInterval,
		IsFailure:                isFailure(cfg.IsFailure),
		RetryDelayFunc:           retryDelay(cfg.RetryDelayFunc, time.Now),
		Logger:                   newAsynqLogger(log),
		// The slog handler decides what is enabled; asynq filtering first
		// would hide debug lines from a handler that wants them.
		LogLevel: asynq.DebugLevel,
	}
	if cfg.ErrorHandler != nil {
		c.ErrorHandler = tenantErrorHandler{cfg.ErrorHandler}
	}
	if c.Concurrency <= 0 {
		c.Concurrency = runtime.NumCPU()
	}
	if len(served(c.Queues)) == 0 {
		c.Queues = map[string]int{DefaultQueue: 1}
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	// asynq would turn a negative interval into a busy loop.
	if c.DelayedTaskCheckInterval <= 0 {
		c.DelayedTaskCheckInterval = DefaultDelayedTaskCheckInterval
	}
	if c.TaskCheckInterval <= 0 {
		c.TaskCheckInterval = DefaultTaskCheckInterval
		if cfg.Gate != nil {
			c.TaskCheckInterval = DefaultDispatchTaskCheckInterval
		}
	}
	return c
}

// served lists the queues asynq serves: those of positive weight.
func served(queues map[string]int) []string {
	var qs []string
	for q, w := range queues {
		if w > 0 {
			qs = append(qs, q)
		}
	}
	return qs
}

// Start starts processing tasks with h and returns at once. It returns an
// error if h is nil, if r is nil or not a RedisConnOpt asynq knows, or if the
// Worker is already running; asynq.ErrServerClosed once Shutdown has been
// called. Call Shutdown to stop it.
func (w *Worker) Start(h asynq.Handler) error {
	if h == nil {
		return errors.New("worker: nil handler")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.redis == nil && w.client == nil:
		return errors.New("worker: nil RedisConnOpt")
	case w.fair && w.gate == nil:
		return errors.New("worker: Config.Fair needs Config.Gate: fair dispatch admits through the producers' gate")
	case w.closed:
		return asynq.ErrServerClosed
	case w.srv != nil:
		return errors.New("worker: already running")
	}
	rdb, err := w.redisClient()
	if err != nil {
		return err
	}
	var disp *dispatch.Server
	if w.gate != nil {
		// The dispatcher's scripts need Redis 7 and one server (or a
		// cluster client): say so now, not at the first task.
		ctx, cancel := context.WithTimeout(context.Background(), startCheckTimeout)
		err := admission.CheckServer(ctx, rdb)
		cancel()
		if err != nil {
			w.closeClient(rdb)
			return fmt.Errorf("worker: %w", err)
		}
		// Recorded before asynq starts, so that producers route to the
		// queues before the first task is fetched.
		if disp, err = dispatch.New(rdb, w.gate, w.log).Serve(dispatch.Worker{
			Queues: slices.Sorted(maps.Keys(w.cfg.Queues)), Concurrency: w.cfg.Concurrency,
			Fair: w.fair, Observe: w.observe, RestartGrace: w.grace, HandOff: true,
		}); err != nil {
			w.closeClient(rdb)
			return fmt.Errorf("worker: serving the dispatcher: %w", err)
		}
	}
	var forAsynq redis.UniversalClient = rdb
	if disp != nil {
		h := handOff{UniversalClient: rdb, disp: disp, stopped: &w.stopping}
		if qs := served(w.cfg.Queues); len(qs) == 1 {
			// asynq looks into a worker's queues one after another: a wait
			// in one would hold up the others; and tasks taken ahead from
			// one would take the slots asynq shares among them by priority.
			h.wait = w.cfg.TaskCheckInterval
			w.ahead = newTakeAhead(rdb, qs[0], w.cfg.Concurrency)
			h.ahead = w.ahead
		}
		forAsynq = h
	}
	srv := asynq.NewServerFromRedisClient(forAsynq, w.cfg)
	if err := srv.Start(w.handler(h, rdb, disp)); err != nil {
		if disp != nil {
			disp.Close()
		}
		w.closeClient(rdb)
		return err
	}
	w.srv, w.rdb, w.disp = srv, rdb, disp
	if w.ahead != nil {
		w.stopSweep, w.swept = make(chan struct{}), make(chan struct{})
		go w.ahead.sweep(w.stopSweep, w.swept, w.log)
	}
	return nil
}

// redisClient returns the caller's client (NewFromRedis), or makes one
// from the RedisConnOpt that the Worker owns: New starts nothing, and
// Shutdown can close it whatever state asynq is in.
func (w *Worker) redisClient() (redis.UniversalClient, error) {
	if w.client != nil {
		return w.client, nil
	}
	rdb, ok := w.redis.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return nil, fmt.Errorf("worker: unsupported RedisConnOpt type %T", w.redis)
	}
	return rdb, nil
}

// closeClient closes rdb unless it is the caller's.
func (w *Worker) closeClient(rdb redis.UniversalClient) {
	if rdb == w.client {
		return
	}
	if err := rdb.Close(); err != nil {
		w.log.Warn("worker: closing the Redis client", "err", err)
	}
}

// Run starts processing tasks with h, blocks until the process receives
// SIGINT or SIGTERM, then shuts down gracefully (see Shutdown) and returns nil.
// It also returns nil, at once, when Shutdown is called from elsewhere and has
// finished. It returns Start's error if the Worker cannot start.
// On Unix, SIGTSTP stops fetching new tasks (see Stop) and Run keeps waiting,
// as asynq.Server.Run does.
//
// Run stops catching these signals before it returns, so a second SIGTERM
// after Run is handled as the program would otherwise handle it.
func (w *Worker) Run(h asynq.Handler) error {
	// Listen before starting, so a signal that arrives during startup is
	// not lost; asynq.Server.Run listens only after Start, and never stops.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, runSignals()...)
	defer signal.Stop(sigs)

	if err := w.Start(h); err != nil {
		return err
	}
	for {
		select {
		case sig := <-sigs:
			if isStopSignal(sig) {
				w.Stop()
				continue
			}
			w.Shutdown()
			return nil
		case <-w.done: // someone else called Shutdown
			return nil
		}
	}
}

// Stop stops fetching new tasks; running handlers carry on. Use it ahead of
// Shutdown to let running tasks finish without taking new ones. Stop releases
// nothing: call Shutdown afterwards. It is a no-op on a Worker that is not
// running.
func (w *Worker) Stop() {
	w.stopping.Store(true)
	w.mu.Lock()
	srv, ahead := w.srv, w.ahead
	w.mu.Unlock()
	if srv != nil {
		srv.Stop() // returns once asynq's last look has
		if ahead != nil {
			ahead.giveBackAll(w.log)
		}
	}
}

// Shutdown stops fetching tasks, waits up to Config.ShutdownTimeout for
// running handlers, puts the tasks of handlers still running back in their
// queue, and closes the Worker's Redis connections. It returns when all of
// that is done, also when called again or concurrently. After Shutdown,
// Start returns asynq.ErrServerClosed.
func (w *Worker) Shutdown() {
	w.mu.Lock()
	if w.done == nil {
		w.mu.Unlock()
		return // a zero Worker, not made by New: nothing to stop
	}
	if w.closed {
		w.mu.Unlock()
		<-w.done
		return
	}
	w.closed = true
	w.stopping.Store(true)
	srv, rdb, disp, ahead := w.srv, w.rdb, w.disp, w.ahead
	w.mu.Unlock()

	defer close(w.done)
	if srv == nil {
		return
	}
	srv.Shutdown()
	if ahead != nil {
		close(w.stopSweep)
		<-w.swept // a giving back in flight ends first
		ahead.giveBackAll(w.log)
	}
	if disp != nil {
		// After every handler has returned, so that their finishes are in,
		// and before the client closes.
		disp.Close()
	}
	w.closeClient(rdb)
}

// handler wraps h in the user's middleware, then in the Worker's own, which
// is outermost so that the user's middleware sees the tenant (and
// FirstStart works in it) and has its panics recovered too. disp, when
// set, hears of every task that ends, outside all of it (finishing.go).
func (w *Worker) handler(h asynq.Handler, rdb redis.UniversalClient, disp *dispatch.Server) asynq.Handler {
	for i := len(w.mw) - 1; i >= 0; i-- {
		h = w.mw[i](h)
	}
	h = tenantHandler{next: h, log: w.log, starts: &starts{rdb: rdb, script: lua.Started()}, keys: newKeyWarnings(w.log)}
	if disp != nil {
		// Outermost, so that it sees a recovered panic as the error it is.
		h = finishing{next: h, disp: disp, isFailure: w.cfg.IsFailure}
	}
	return h
}

type tenantKey struct{}

// Tenant returns the tenant of the task being handled: the value of the
// enqueue.TenantHeader header, set by enqueue.Client. It returns "" for a
// task enqueued without one, and for a ctx that does not come from a Worker.
func Tenant(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	s, _ := ctx.Value(tenantKey{}).(string)
	return s
}

// withTenant puts t's tenant (Tenant) and keys (Keys) into ctx, and
// returns the tenant.
func withTenant(ctx context.Context, t *asynq.Task) (context.Context, string) {
	ctx = withKeys(ctx, t)
	tenant := t.Headers()[enqueue.TenantHeader]
	if tenant == "" {
		return ctx, ""
	}
	return context.WithValue(ctx, tenantKey{}, tenant), tenant
}

// tenantHandler puts the task's tenant and keys into the context and
// recovers panics. asynq recovers panics too, but its error names neither
// tenant nor task type. It warns of a ThrottledKey for a key the task does
// not carry.
type tenantHandler struct {
	next   asynq.Handler
	log    *slog.Logger
	starts *starts
	keys   *keyWarnings
}

func (h tenantHandler) ProcessTask(ctx context.Context, t *asynq.Task) (err error) {
	ctx, tenant := withTenant(h.starts.with(ctx), t)
	defer func() {
		if v := recover(); v != nil {
			id, _ := asynq.GetTaskID(ctx)
			h.log.ErrorContext(ctx, "worker: handler panicked",
				"tenant", tenant, "task_type", t.Type(), "task_id", id,
				"panic", v, "stack", string(debug.Stack()))
			err = &PanicError{Tenant: tenant, TaskType: t.Type(), Value: v}
		}
	}()
	err = h.next.ProcessTask(ctx, t)
	h.keys.check(ctx, t, err)
	return err
}

// PanicError is the error a task fails with when its handler (or a
// middleware from Config.Middleware) panics. The Worker logs the stack.
//
// asynq.IsPanicError reports false for it, because the Worker recovers the
// panic before asynq does; use errors.As with a *PanicError instead.
type PanicError struct {
	Tenant   string // tenant of the task; "" if it had none
	TaskType string // asynq task type
	Value    any    // the value passed to panic
}

// Error names the tenant, the task type and the panic value.
func (e *PanicError) Error() string {
	return fmt.Sprintf("worker: handler for task type %q of tenant %q panicked: %v", e.TaskType, e.Tenant, e.Value)
}

// Unwrap returns the panic value if it is an error, so that errors.Is and
// errors.As see through a panic(err).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// tenantErrorHandler gives the user's ErrorHandler the tenant, which asynq's
// ctx lacks because asynq calls it outside our middleware.
type tenantErrorHandler struct{ next asynq.ErrorHandler }

func (h tenantErrorHandler) HandleError(ctx context.Context, t *asynq.Task, err error) {
	ctx, _ = withTenant(ctx, t)
	h.next.HandleError(ctx, t, err)
}

// LevelFatal is the slog level of asynq's Fatal lines, above slog.LevelError.
const LevelFatal = slog.LevelError + 4

// asynqLogger adapts slog to asynq.Logger.
type asynqLogger struct {
	log *slog.Logger
	// exit is os.Exit, replaceable only by tests.
	exit func(code int)
}

func newAsynqLogger(log *slog.Logger) *asynqLogger {
	return &asynqLogger{log: log.With("component", "asynq"), exit: os.Exit}
}

func (l *asynqLogger) Debug(args ...any) { l.print(slog.LevelDebug, args) }
func (l *asynqLogger) Info(args ...any)  { l.print(slog.LevelInfo, args) }
func (l *asynqLogger) Warn(args ...any)  { l.print(slog.LevelWarn, args) }
func (l *asynqLogger) Error(args ...any) { l.print(slog.LevelError, args) }

// Fatal logs at LevelFatal and exits with status 1, as the asynq.Logger
// contract requires. asynq v0.26 itself never calls it.
func (l *asynqLogger) Fatal(args ...any) {
	l.print(LevelFatal, args)
	l.exit(1)
}

func (l *asynqLogger) print(level slog.Level, args []any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	l.log.Log(ctx, level, fmt.Sprint(args...))
}
