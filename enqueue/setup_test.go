package enqueue_test

import (
	"context"
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
	plain     bool       // the Client is made by New, on an asynq.Client of the test's
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
	f.client = enqueue.NewFromRedis(f.asynqRDB, f.gate, cfg.opts...)
	if cfg.plain {
		f.client = enqueue.New(f.asynq, f.gate, cfg.opts...)
	}
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
