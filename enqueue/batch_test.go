package enqueue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
)

// outcome is a Result reduced to what a test compares.
type outcome struct {
	ID      string // of the stored task; "" when none
	Outcome string // the decision's; "" for the zero Decision
	At      time.Time
	Err     string // the sentinel the error matches; "" for none
}

func summarize(r enqueue.Result) outcome {
	var o outcome
	if r.Info != nil {
		o.ID = r.Info.ID
	}
	if r.Decision != (admission.Decision{}) {
		o.Outcome, o.At = r.Decision.Outcome.String(), r.Decision.At
	}
	switch {
	case r.Err == nil:
	case errors.Is(r.Err, enqueue.ErrRejected):
		o.Err = "rejected"
	case errors.Is(r.Err, asynq.ErrTaskIDConflict):
		o.Err = "task ID conflict"
	default:
		o.Err = "other"
	}
	return o
}

func TestEnqueueBatch(t *testing.T) {
	// Limit 2 in 10s, deferrable by 15s. At base (…:00.25) a and b are
	// admitted; c and d get base+10s rounded up, sec(11); e's slot would be
	// sec(21), 20.75s ahead, so e and everything after it is rejected, with
	// a retry possible at sec(21) - 15s.
	f := newFixture(t, fixtureConfig{quota: admission.Quota{Limit: 2, Window: 10 * time.Second, MaxDelay: 15 * time.Second}})
	task := func(id string) *asynq.Task { return asynq.NewTask("test", nil, asynq.TaskID(id)) }
	tasks := []*asynq.Task{
		task("a"),
		nil,
		task("b"),
		asynq.NewTask(" ", nil),
		task("c"),
		task("d"),
		task("e"),
		asynq.NewTask("test", nil, asynq.TaskID("f")),
	}
	rs, err := f.client.EnqueueBatch(context.Background(), "acme", tasks, asynq.MaxRetry(1))
	if err != nil {
		t.Fatalf("EnqueueBatch: %v", err)
	}
	got := make([]outcome, len(rs))
	for i, r := range rs {
		got[i] = summarize(r)
	}
	want := []outcome{
		{ID: "a", Outcome: "admitted", At: base},
		{Err: "other"},
		{ID: "b", Outcome: "admitted", At: base},
		{Err: "other"},
		{ID: "c", Outcome: "deferred", At: sec(11)},
		{ID: "d", Outcome: "deferred", At: sec(11)},
		{Outcome: "rejected", At: sec(21).Add(-15 * time.Second), Err: "rejected"},
		{Outcome: "rejected", At: sec(21).Add(-15 * time.Second), Err: "rejected"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results mismatch (-want,+got):\n%s", diff)
	}
	for i, r := range rs {
		if want := i == 0 || i == 2 || i == 4 || i == 5; r.Enqueued() != want {
			t.Errorf("result %d (%+v): Enqueued() = %v, want %v", i, r, r.Enqueued(), want)
		}
	}
	if (enqueue.Result{}).Enqueued() {
		t.Error("a zero Result reads as enqueued")
	}
	pending, scheduled := f.queued(t, "default")
	if diff := cmp.Diff([][]string{{"a", "b"}, {"c", "d"}}, [][]string{pending, scheduled}); diff != "" {
		t.Errorf("queue [pending, scheduled] mismatch (-want,+got):\n%s", diff)
	}
	for _, id := range []string{"a", "c"} {
		info, err := f.inspector.GetTaskInfo("default", id)
		if err != nil {
			t.Fatalf("GetTaskInfo(%q): %v", id, err)
		}
		if info.MaxRetry != 1 || info.Headers[enqueue.TenantHeader] != "acme" {
			t.Errorf("task %q: MaxRetry %d, headers %v; want the batch's option and the tenant", id, info.MaxRetry, info.Headers)
		}
	}
}

func TestEnqueueBatchFailsAsAWhole(t *testing.T) {
	tests := []struct {
		desc    string
		tenant  string
		opts    []asynq.Option
		quotas  admission.StaticQuotas
		tasks   []*asynq.Task // nil: one task
		wantErr error         // nil: any error
	}{
		{desc: "an invalid tenant", tenant: "", quotas: admission.StaticQuotas{Default: &roomy}, wantErr: admission.ErrInvalidTenant},
		{desc: "a TaskID among the batch's options", tenant: "acme", opts: []asynq.Option{asynq.TaskID("x")}, quotas: admission.StaticQuotas{Default: &roomy}},
		{desc: "a tenant without quota", tenant: "acme", quotas: admission.StaticQuotas{}, wantErr: admission.ErrNoQuota},
		{desc: "one task ID twice", tenant: "acme", quotas: admission.StaticQuotas{Default: &roomy}, tasks: []*asynq.Task{
			asynq.NewTask("test", nil, asynq.TaskID("x")),
			asynq.NewTask("test", nil),
			asynq.NewTask("other", []byte("y"), asynq.TaskID("x")),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFixture(t, fixtureConfig{quota: roomy})
			g := admission.New(f.rdb, tc.quotas)
			defer g.Close()
			c := enqueue.New(f.asynq, g)
			tasks := tc.tasks
			if tasks == nil {
				tasks = []*asynq.Task{asynq.NewTask("test", nil)}
			}
			rs, err := c.EnqueueBatch(context.Background(), tc.tenant, tasks, tc.opts...)
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("EnqueueBatch = %v, %v; want an error matching %v", rs, err, tc.wantErr)
			}
			if rs != nil {
				t.Errorf("results = %v, want nil", rs)
			}
			if keys := f.mr.Keys(); len(keys) != 0 {
				t.Errorf("Redis holds %v, want nothing written", keys)
			}
		})
	}
}

func TestEnqueueBatchEmpty(t *testing.T) {
	f := newFixture(t, fixtureConfig{quota: roomy})
	rs, err := f.client.EnqueueBatch(context.Background(), "acme", nil)
	if err != nil || len(rs) != 0 {
		t.Errorf("EnqueueBatch(nil) = %v, %v; want no results and no error", rs, err)
	}
}

func TestEnqueueRefusesInvalidTasksBeforeAdmission(t *testing.T) {
	tests := []struct {
		desc    string
		tenant  string
		task    *asynq.Task
		opts    []asynq.Option
		tasks   []*asynq.Task // nil: one task
		wantErr error         // nil: any error
	}{
		{desc: "a nil task", tenant: "acme"},
		{desc: "an empty task type", tenant: "acme", task: asynq.NewTask("", nil)},
		{desc: "a blank task ID", tenant: "acme", task: asynq.NewTask("test", nil), opts: []asynq.Option{asynq.TaskID("  ")}},
		{desc: "an invalid tenant", tenant: "a\x00b", task: asynq.NewTask("test", nil), wantErr: admission.ErrInvalidTenant},
		// What asynq would refuse, before it writes anything: refused
		// before admission, so that it costs no slot.
		{desc: "a Unique TTL under a second", tenant: "acme", task: asynq.NewTask("test", nil), opts: []asynq.Option{asynq.Unique(time.Millisecond)}},
		{desc: "a Unique TTL under a second on the task", tenant: "acme", task: asynq.NewTask("test", nil, asynq.Unique(time.Millisecond))},
		{desc: "a blank queue", tenant: "acme", task: asynq.NewTask("test", nil), opts: []asynq.Option{asynq.Queue(" ")}},
		{desc: "a blank group", tenant: "acme", task: asynq.NewTask("test", nil), opts: []asynq.Option{asynq.Group("")}},
		{desc: "a blank task ID overridden", tenant: "acme", task: asynq.NewTask("test", nil), opts: []asynq.Option{asynq.TaskID(""), asynq.TaskID("x")}},
		{desc: "a task ID past MaxIDLen", tenant: "acme", task: asynq.NewTask("test", nil, asynq.TaskID(strings.Repeat("x", admission.MaxIDLen+1))), wantErr: admission.ErrInvalidID},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFixture(t, fixtureConfig{quota: roomy})
			info, d, err := f.client.Enqueue(context.Background(), tc.tenant, tc.task, tc.opts...)
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("Enqueue = %v, %v, %v; want an error matching %v", info, d, err, tc.wantErr)
			}
			if d != (admission.Decision{}) {
				t.Errorf("decision = %+v, want the zero value", d)
			}
			if keys := f.mr.Keys(); len(keys) != 0 {
				t.Errorf("Redis holds %v, want nothing written", keys)
			}
		})
	}
}

// TestEnqueueBatchRefusesMoreThanMaxBatch: past admission.MaxBatch tasks,
// EnqueueBatch is ErrBatchTooLarge, and nothing is written.
func TestEnqueueBatchRefusesMoreThanMaxBatch(t *testing.T) {
	f := newFixture(t, fixtureConfig{quota: roomy})
	tasks := make([]*asynq.Task, admission.MaxBatch+1)
	for i := range tasks {
		tasks[i] = asynq.NewTask("test", nil)
	}
	rs, err := f.client.EnqueueBatch(context.Background(), "acme", tasks)
	if !errors.Is(err, admission.ErrBatchTooLarge) || rs != nil {
		t.Errorf("EnqueueBatch of %d tasks: %d results, %v; want ErrBatchTooLarge", len(tasks), len(rs), err)
	}
	if keys := f.mr.Keys(); len(keys) != 0 {
		t.Errorf("Redis holds %v, want nothing written", keys)
	}
}
