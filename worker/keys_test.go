package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/worker"
)

func TestThrottledKeyError(t *testing.T) {
	err := fmt.Errorf("calling stripe: %w", worker.ThrottledKey("api:stripe", 1500*time.Millisecond))
	var te *worker.ThrottledError
	if !errors.As(err, &te) {
		t.Fatalf("errors.As(%v, *ThrottledError) = false, want true", err)
	}
	if te.Key != "api:stripe" || te.RetryAfter != 1500*time.Millisecond {
		t.Errorf("Key %q, RetryAfter %v; want api:stripe, 1.5s", te.Key, te.RetryAfter)
	}
	if got, want := te.Error(), `worker: throttled downstream on key "api:stripe", retry after 1.5s`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := worker.ThrottledKey("", time.Second).Error(), `worker: throttled downstream on key "", retry after 1s`; got != want {
		t.Errorf("ThrottledKey(\"\").Error() = %q, want %q", got, want)
	}
	var plain *worker.ThrottledError
	if !errors.As(worker.Throttled(time.Second), &plain) || plain.Key != "" {
		t.Errorf("Throttled's error %+v, want a *ThrottledError without a key", plain)
	}
}

// keyedEnv is an env with an enqueue.Client on its Redis.
type keyedEnv struct {
	*env
	rdb    *redis.Client
	gate   *admission.Gate
	client *enqueue.Client
}

func newKeyedEnv(t *testing.T) *keyedEnv {
	t.Helper()
	e := newEnv(t)
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr})
	t.Cleanup(func() { rdb.Close() })
	q := admission.Quota{Limit: admission.NoLimit}
	gate := admission.New(rdb, admission.StaticQuotas{Default: &q})
	t.Cleanup(func() { gate.Close() })
	return &keyedEnv{env: e, rdb: rdb, gate: gate, client: enqueue.NewFromRedis(rdb, gate)}
}

// The keys a task was enqueued with reach its handler, its middleware and
// the ErrorHandler, sorted and each once.
func TestKeysReachHandler(t *testing.T) {
	t.Parallel()
	e := newKeyedEnv(t)
	got := make(chan string, 10)
	cfg := testConfig(t)
	cfg.ErrorHandler = asynq.ErrorHandlerFunc(func(ctx context.Context, task *asynq.Task, err error) {
		got <- "error handler: " + strings.Join(worker.Keys(ctx), ",")
	})
	cfg.Middleware = []asynq.MiddlewareFunc{func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			got <- "middleware: " + strings.Join(worker.Keys(ctx), ",")
			return next.ProcessTask(ctx, task)
		})
	}}
	e.start(t, cfg, func(ctx context.Context, task *asynq.Task) error {
		got <- task.Type() + ": " + strings.Join(worker.Keys(ctx), ",") + " of " + worker.Tenant(ctx)
		if task.Type() == "fails" {
			return errors.New("boom")
		}
		return nil
	})
	ctx := context.Background()
	if _, _, err := e.client.Enqueue(ctx, "acme", asynq.NewTask("keyed", nil), enqueue.Keys("db", "api:stripe", "db")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"middleware: api:stripe,db", "keyed: api:stripe,db of acme"} {
		if g := receive(t, want, got); g != want {
			t.Errorf("saw %q, want %q", g, want)
		}
	}
	if _, _, err := e.client.Enqueue(ctx, "acme", asynq.NewTask("fails", nil), enqueue.Keys("db"), asynq.MaxRetry(0)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"middleware: db", "fails: db of acme", "error handler: db"} {
		if g := receive(t, want, got); g != want {
			t.Errorf("saw %q, want %q", g, want)
		}
	}
	if _, _, err := e.client.Enqueue(ctx, "acme", asynq.NewTask("keyless", nil)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"middleware: ", "keyless:  of acme"} {
		if g := receive(t, want, got); g != want {
			t.Errorf("saw %q, want %q", g, want)
		}
	}
	if keys := worker.Keys(context.Background()); keys != nil {
		t.Errorf("Keys outside a Worker = %q, want nil", keys)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ThrottledKey with a key the task does not carry is a handler's mistake:
// the task is still retried after d without counting a failure, and the
// Worker logs a warning naming the key, once per key.
func TestThrottledKeyTheTaskDoesNotCarry(t *testing.T) {
	t.Parallel()
	e := newKeyedEnv(t)
	var logs syncBuffer
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	const throttle = time.Second
	var mu sync.Mutex
	runs := map[string][]time.Time{}
	done := make(chan string, 10)
	e.start(t, cfg, func(ctx context.Context, task *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		mu.Lock()
		runs[id] = append(runs[id], time.Now())
		n := len(runs[id])
		mu.Unlock()
		if n == 1 {
			return worker.ThrottledKey(string(task.Payload()), throttle)
		}
		done <- id
		return nil
	})
	ctx := context.Background()
	var infos []*asynq.TaskInfo
	for i, key := range []string{"api:strip", "api:strip", "db"} {
		info, _, err := e.client.Enqueue(ctx, "acme", asynq.NewTask("t", []byte(key)),
			enqueue.Keys("api:stripe"), asynq.TaskID(fmt.Sprintf("task-%d", i)), asynq.Retention(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
	}
	for range infos {
		receive(t, "a retried task", done)
	}
	mu.Lock()
	for id, at := range runs {
		if len(at) != 2 || at[1].Sub(at[0]) < throttle {
			t.Errorf("task %s ran at %v, want twice, the second at least %v after the first", id, at, throttle)
		}
	}
	mu.Unlock()
	for _, info := range infos {
		var ti *asynq.TaskInfo
		poll(t, "the task to complete", func() bool {
			var err error
			ti, err = e.inspector.GetTaskInfo(info.Queue, info.ID)
			return err == nil && ti.State == asynq.TaskStateCompleted
		})
		if ti.Retried != 0 {
			t.Errorf("task %s Retried = %d, want 0: a throttle is no failure", info.ID, ti.Retried)
		}
	}
	var warned []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if strings.Contains(line, "does not carry") {
			_, rest, _ := strings.Cut(line, " key=")
			key, _, _ := strings.Cut(rest, " ")
			warned = append(warned, key)
		}
	}
	slices.Sort(warned)
	if diff := cmp.Diff([]string{"api:strip", "db"}, warned); diff != "" {
		t.Errorf("keys warned of (-want,+got):\n%s\nlog:\n%s", diff, logs.String())
	}
}
