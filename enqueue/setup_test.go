package enqueue_test

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
)

// base is the Redis server time of every unit test: miniredis answers TIME
// with it, so decisions are exact. It lies far ahead of the local clock, so
// asynq, which compares ProcessAt with the local clock, schedules every
// deferred task instead of making it pending at once. The quarter second
// shows the rounding of slots to whole seconds.
var base = time.Date(2100, 1, 1, 0, 0, 0, 250_000_000, time.UTC)

// sec is base's whole second plus n seconds.
func sec(n int) time.Time { return base.Truncate(time.Second).Add(time.Duration(n) * time.Second) }

// fixture is an enqueue.Client on a miniredis of its own, whose clock stands
// still at base.
type fixture struct {
	mr        *miniredis.Miniredis
	rdb       *redis.Client // the gate's connection
	asynqRDB  *redis.Client // asynq's connection, for hooks
	asynq     *asynq.Client // on asynqRDB, to enqueue around the gate
	gate      *admission.Gate
	client    *enqueue.Client
	inspector *asynq.Inspector
}

type fixtureConfig struct {
	quota     admission.Quota
	gateOpts  []admission.Option
	opts      []enqueue.Option
	asynqHook redis.Hook // on asynq's connection only; nil means none
	gateHook  redis.Hook // on the gate's connection only; nil means none
}

func newFixture(t *testing.T, cfg fixtureConfig) *fixture {
	t.Helper()
	mr := miniredis.RunT(t)
	mr.SetTime(base)
	f := &fixture{
		mr:       mr,
		rdb:      redis.NewClient(&redis.Options{Addr: mr.Addr()}),
		asynqRDB: redis.NewClient(&redis.Options{Addr: mr.Addr()}),
	}
	if cfg.asynqHook != nil {
		f.asynqRDB.AddHook(cfg.asynqHook)
	}
	if cfg.gateHook != nil {
		f.rdb.AddHook(cfg.gateHook)
	}
	t.Cleanup(func() {
		f.rdb.Close()
		f.asynqRDB.Close()
	})
	f.gate = admission.New(f.rdb, admission.StaticQuotas{Default: &cfg.quota}, cfg.gateOpts...)
	t.Cleanup(func() { _ = f.gate.Close() })
	f.asynq = asynq.NewClientFromRedisClient(f.asynqRDB)
	f.client = enqueue.New(f.asynq, f.gate, cfg.opts...)
	f.inspector = asynq.NewInspectorFromRedisClient(f.rdb)
	return f
}

// mustEnqueue enqueues a task of type "test" with the given ID.
func (f *fixture) mustEnqueue(t *testing.T, tenant, id string) admission.Decision {
	t.Helper()
	_, d, err := f.client.Enqueue(context.Background(), tenant, asynq.NewTask("test", nil), asynq.TaskID(id))
	if err != nil {
		t.Fatalf("Enqueue(%q, %q): %v", tenant, id, err)
	}
	return d
}

// usage returns the entries in tenant's log: in the window and ahead of it.
func (f *fixture) usage(t *testing.T, tenant string) int {
	t.Helper()
	u, err := f.gate.Usage(context.Background(), tenant)
	if err != nil {
		t.Fatalf("Usage(%q): %v", tenant, err)
	}
	return u.InWindow + u.Reserved
}

// queued returns the IDs of the tasks in queue, pending and scheduled.
func (f *fixture) queued(t *testing.T, queue string) (pending, scheduled []string) {
	t.Helper()
	ps, err := f.inspector.ListPendingTasks(queue)
	if err != nil {
		t.Fatalf("ListPendingTasks: %v", err)
	}
	ss, err := f.inspector.ListScheduledTasks(queue)
	if err != nil {
		t.Fatalf("ListScheduledTasks: %v", err)
	}
	for _, ti := range ps {
		pending = append(pending, ti.ID)
	}
	for _, ti := range ss {
		scheduled = append(scheduled, ti.ID)
	}
	return pending, scheduled
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

// scriptDoneHook is a go-redis hook for asynq's connection that, once
// armed, cancels a context as soon as a script call (asynq's write of a
// task) has succeeded, and then counts every command that follows: none
// should, once the context is done.
type scriptDoneHook struct {
	cancel atomic.Pointer[context.CancelFunc]
	fired  atomic.Bool
	after  atomic.Int64 // commands begun after the cancel
}

func (h *scriptDoneHook) arm(cancel context.CancelFunc) { h.cancel.Store(&cancel) }

func (h *scriptDoneHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptDoneHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fired.Load() {
			h.after.Add(1)
		}
		err := next(ctx, cmd)
		if name := cmd.Name(); err == nil && (name == "evalsha" || name == "eval") {
			if c := h.cancel.Swap(nil); c != nil {
				h.fired.Store(true)
				(*c)()
			}
		}
		return err
	}
}

func (h *scriptDoneHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.fired.Load() {
			h.after.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// failHook is a go-redis hook that fails every command named name, as a
// connection reset would, without sending it.
type failHook struct{ name string }

func (h failHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h failHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == h.name {
			cmd.SetErr(io.EOF)
			return io.EOF
		}
		return next(ctx, cmd)
	}
}

func (h failHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
