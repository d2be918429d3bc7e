package enqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// keyed is an enqueue.Client on a redis-server of its own, with quotas q.
type keyed struct {
	rdb    *redis.Client
	gate   *admission.Gate
	client *enqueue.Client
	ins    *asynq.Inspector
}

func newKeyed(t *testing.T, q admission.Quotas) *keyed {
	t.Helper()
	srv := redistest.Start(t)
	k := &keyed{rdb: srv.Client(t)}
	k.gate = admission.New(k.rdb, q)
	t.Cleanup(func() { _ = k.gate.Close() })
	k.client = enqueue.NewFromRedis(k.rdb, k.gate)
	k.ins = asynq.NewInspectorFromRedisClient(k.rdb)
	return k
}

// redisKeys returns every key in the server.
func (k *keyed) redisKeys(t *testing.T) []string {
	t.Helper()
	keys, err := k.rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	return keys
}

// Bad Keys and Priority options are refused before anything reaches Redis,
// whether they are given to Enqueue, set on the task or given to
// EnqueueBatch.
func TestBadKeysAndPriorityWriteNothing(t *testing.T) {
	nine := []string{"k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9"}
	tests := []struct {
		desc    string
		opt     asynq.Option
		wantKey bool // the error matches admission.ErrInvalidKey
	}{
		{"an empty key", enqueue.Keys(""), true},
		{"a key with a control character", enqueue.Keys("api\x00stripe"), true},
		{"a key with a newline, the header's separator", enqueue.Keys("api\nstripe"), true},
		{"a key of invalid UTF-8", enqueue.Keys("api\xc3"), true},
		{"a key over 256 bytes", enqueue.Keys(strings.Repeat("k", 257)), true},
		{"more than MaxKeys distinct keys", enqueue.Keys(nine...), false},
		{"a priority above MaxPriority", enqueue.Priority(enqueue.MaxPriority + 1), false},
		{"a priority below MinPriority", enqueue.Priority(enqueue.MinPriority - 1), false},
	}
	k := newKeyed(t, admission.StaticQuotas{Default: &roomy})
	ctx := context.Background()
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			check := func(how string, err error) {
				t.Helper()
				if !errors.Is(err, enqueue.ErrInvalidOption) {
					t.Errorf("%s: %v, want an error matching ErrInvalidOption", how, err)
				}
				if got := errors.Is(err, admission.ErrInvalidKey); got != tc.wantKey {
					t.Errorf("%s: errors.Is(%v, admission.ErrInvalidKey) = %v, want %v", how, err, got, tc.wantKey)
				}
				if err != nil && !strings.Contains(err.Error(), tc.opt.String()) {
					t.Errorf("%s: error %q does not name the option %v", how, err, tc.opt)
				}
			}
			_, _, err := k.client.Enqueue(ctx, "acme", asynq.NewTask("t", nil), tc.opt)
			check("Enqueue's option", err)
			_, _, err = k.client.Enqueue(ctx, "acme", asynq.NewTask("t", nil, tc.opt))
			check("the task's option", err)
			// A good option after it does not save it.
			_, _, err = k.client.Enqueue(ctx, "acme", asynq.NewTask("t", nil, tc.opt), enqueue.Keys("ok"), enqueue.Priority(0))
			check("overridden", err)
			rs, err := k.client.EnqueueBatch(ctx, "acme", []*asynq.Task{asynq.NewTask("t", nil), asynq.NewTask("t", nil)}, tc.opt)
			if err != nil {
				t.Fatalf("EnqueueBatch: %v, want the error in each Result", err)
			}
			for i, r := range rs {
				check(fmt.Sprintf("EnqueueBatch's option, task %d", i), r.Err)
			}
			if keys := k.redisKeys(t); len(keys) > 0 {
				t.Errorf("Redis holds %v, want nothing written", keys)
			}
		})
	}
}

// A key's quota that cannot be read fails the task as the dispatcher's
// failures do (admission.ErrUnavailable); one that is stored but invalid
// says so (admission.ErrInvalidQuota). Either way nothing is written and
// the tenant keeps its slots.
func TestUnreadableKeyQuotaWritesNothing(t *testing.T) {
	tests := []struct {
		desc   string
		quotas admission.Quotas
		want   error
	}{
		{"the quota cannot be read", failingKeyQuotas{admission.StaticQuotas{Default: &roomy}}, admission.ErrUnavailable},
		{
			"the stored quota is not a key's",
			admission.StaticQuotas{Default: &roomy, Keys: map[string]admission.Quota{"api": {Limit: 5, Window: time.Second}}},
			admission.ErrInvalidQuota,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			k := newKeyed(t, tc.quotas)
			ctx := context.Background()
			_, _, err := k.client.Enqueue(ctx, "acme", asynq.NewTask("t", nil), enqueue.Keys("ok", "api"))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Enqueue: %v, want an error matching %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), `key "api"`) {
				t.Errorf("error %q does not name the key", err)
			}
			if enqueue.IsAmbiguous(err) {
				t.Errorf("IsAmbiguous(%v) = true, want a definite failure", err)
			}
			if keys := k.redisKeys(t); len(keys) > 0 {
				t.Errorf("Redis holds %v, want nothing written", keys)
			}
			// Without the key the task goes in.
			if _, _, err := k.client.Enqueue(ctx, "acme", asynq.NewTask("t", nil), enqueue.Keys("ok")); err != nil {
				t.Errorf("Enqueue without the bad key: %v", err)
			}
		})
	}
}

// failingKeyQuotas has tenants' quotas, but cannot read a key's unless it
// is "ok".
type failingKeyQuotas struct{ admission.StaticQuotas }

func (f failingKeyQuotas) KeyQuota(ctx context.Context, key string) (admission.Quota, bool, error) {
	if key == "ok" {
		return admission.Quota{}, false, nil
	}
	return admission.Quota{}, false, errors.New("the key quota store is down")
}

// The enqueued task carries its keys in KeysHeader, sorted and each once,
// and asynq keeps the rest of its options; a task without keys carries no
// such header, even one its caller's headers held.
func TestEnqueueStampsTheKeys(t *testing.T) {
	tests := []struct {
		desc     string
		task     *asynq.Task
		opts     []asynq.Option
		wantKeys string // "" means no header
	}{
		{
			desc:     "Enqueue's keys, sorted and each once",
			task:     asynq.NewTask("t", nil),
			opts:     []asynq.Option{enqueue.Keys("db", "api:stripe", "db"), enqueue.Priority(7)},
			wantKeys: "api:stripe\ndb",
		},
		{
			desc:     "the task's own keys",
			task:     asynq.NewTask("t", nil, enqueue.Keys("api:stripe"), asynq.MaxRetry(3)),
			wantKeys: "api:stripe",
		},
		{
			desc:     "Enqueue's keys replace the task's",
			task:     asynq.NewTask("t", nil, enqueue.Keys("api:stripe")),
			opts:     []asynq.Option{enqueue.Keys("db")},
			wantKeys: "db",
		},
		{
			desc: "Keys() takes the task's away",
			task: asynq.NewTask("t", nil, enqueue.Keys("api:stripe")),
			opts: []asynq.Option{enqueue.Keys()},
		},
		{
			desc: "a stale header of the caller's goes",
			task: asynq.NewTaskWithHeaders("t", nil, map[string]string{enqueue.KeysHeader: "old", "trace": "x"}),
		},
		{
			desc:     "a stale header of the caller's is replaced",
			task:     asynq.NewTaskWithHeaders("t", nil, map[string]string{enqueue.KeysHeader: "old"}),
			opts:     []asynq.Option{enqueue.Keys("new")},
			wantKeys: "new",
		},
	}
	k := newKeyed(t, admission.StaticQuotas{Default: &roomy})
	ctx := context.Background()
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			orig := tc.task.Headers()
			info, _, err := k.client.Enqueue(ctx, "acme", tc.task, append(tc.opts, asynq.Queue("keyed"))...)
			if err != nil {
				t.Fatalf("Enqueue: %v", err)
			}
			stored, err := k.ins.GetTaskInfo("keyed", info.ID)
			if err != nil {
				t.Fatalf("GetTaskInfo: %v", err)
			}
			for _, ti := range []*asynq.TaskInfo{info, stored} {
				got, ok := ti.Headers[enqueue.KeysHeader]
				if ok != (tc.wantKeys != "") || got != tc.wantKeys {
					t.Errorf("header %s = %q (present %v), want %q", enqueue.KeysHeader, got, ok, tc.wantKeys)
				}
				if ti.Headers[enqueue.TenantHeader] != "acme" {
					t.Errorf("tenant header %q, want acme", ti.Headers[enqueue.TenantHeader])
				}
			}
			if diff := cmp.Diff(orig, tc.task.Headers()); diff != "" {
				t.Errorf("the caller's task was modified (-want,+got):\n%s", diff)
			}
		})
	}
	t.Run("EnqueueBatch stamps each task", func(t *testing.T) {
		tasks := []*asynq.Task{asynq.NewTask("t", nil, enqueue.Keys("own")), asynq.NewTask("t", nil)}
		rs, err := k.client.EnqueueBatch(ctx, "acme", tasks, enqueue.Priority(-3))
		if err != nil {
			t.Fatalf("EnqueueBatch: %v", err)
		}
		want := []string{"own", ""}
		for i, r := range rs {
			if r.Err != nil {
				t.Fatalf("task %d: %v", i, r.Err)
			}
			if got := r.Info.Headers[enqueue.KeysHeader]; got != want[i] {
				t.Errorf("task %d: header %q, want %q", i, got, want[i])
			}
		}
	})
}

// asynq never sees Keys or Priority: the stored task keeps the options it
// knows, set before and after them.
func TestKeysAndPriorityKeepAsynqsOptions(t *testing.T) {
	k := newKeyed(t, admission.StaticQuotas{Default: &roomy})
	task := asynq.NewTask("t", nil, asynq.MaxRetry(4), enqueue.Keys("a"), enqueue.Priority(2))
	info, _, err := k.client.Enqueue(context.Background(), "acme", task,
		enqueue.Priority(3), asynq.Queue("q"), enqueue.Keys("b"), asynq.Timeout(time.Minute))
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	ti, err := k.ins.GetTaskInfo("q", info.ID)
	if err != nil {
		t.Fatalf("GetTaskInfo: %v", err)
	}
	if ti.MaxRetry != 4 || ti.Timeout != time.Minute || ti.Headers[enqueue.KeysHeader] != "b" {
		t.Errorf("stored task: MaxRetry %d, Timeout %v, keys %q; want 4, 1m, b", ti.MaxRetry, ti.Timeout, ti.Headers[enqueue.KeysHeader])
	}
}
