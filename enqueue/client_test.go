package enqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
)

var roomy = admission.Quota{Limit: 100, Window: time.Minute, MaxDelay: time.Hour}

func TestEnqueueID(t *testing.T) {
	tests := []struct {
		desc     string
		task     *asynq.Task
		opts     []asynq.Option
		clientOp []enqueue.Option
		want     string // "" means a generated UUID
	}{
		{
			desc: "asynq.TaskID given to Enqueue is the entry ID",
			task: asynq.NewTask("test", nil),
			opts: []asynq.Option{asynq.TaskID("from-enqueue")},
			want: "from-enqueue",
		},
		{
			desc: "asynq.TaskID set on the task is the entry ID",
			task: asynq.NewTask("test", nil, asynq.TaskID("from-task")),
			want: "from-task",
		},
		{
			desc: "the Enqueue option wins over the task's, as in asynq",
			task: asynq.NewTask("test", nil, asynq.TaskID("from-task")),
			opts: []asynq.Option{asynq.TaskID("from-enqueue")},
			want: "from-enqueue",
		},
		{
			desc: "the last of several TaskID options wins, as in asynq",
			task: asynq.NewTask("test", nil),
			opts: []asynq.Option{asynq.TaskID("first"), asynq.TaskID("last")},
			want: "last",
		},
		{
			desc: "without a TaskID a UUID is generated and passed to asynq",
			task: asynq.NewTask("test", nil, asynq.Queue("default")),
		},
		{
			desc:     "WithIDFunc makes the IDs of tasks without a TaskID",
			task:     asynq.NewTask("test", nil),
			clientOp: []enqueue.Option{enqueue.WithIDFunc(func() string { return "made" })},
			want:     "made",
		},
		{
			desc:     "WithIDFunc does not override a TaskID",
			task:     asynq.NewTask("test", nil),
			opts:     []asynq.Option{asynq.TaskID("given")},
			clientOp: []enqueue.Option{enqueue.WithIDFunc(func() string { return "made" })},
			want:     "given",
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFixture(t, fixtureConfig{quota: roomy, opts: tc.clientOp})
			info, d, err := f.client.Enqueue(context.Background(), "acme", tc.task, tc.opts...)
			if err != nil {
				t.Fatalf("Enqueue: %v", err)
			}
			want := tc.want
			if want == "" {
				if _, err := uuid.Parse(info.ID); err != nil {
					t.Fatalf("generated ID %q is not a UUID: %v", info.ID, err)
				}
				want = info.ID
			}
			got := []string{info.ID, d.ID}
			if diff := cmp.Diff([]string{want, want}, got); diff != "" {
				t.Errorf("[task ID, entry ID] mismatch (-want,+got):\n%s", diff)
			}
			if _, err := f.inspector.GetTaskInfo("default", want); err != nil {
				t.Errorf("task %q not in asynq: %v", want, err)
			}
		})
	}
}

func TestEnqueueSameIDTakesNoSecondSlot(t *testing.T) {
	f := newFixture(t, fixtureConfig{quota: admission.Quota{Limit: 1, Window: time.Minute, MaxDelay: time.Hour}})
	first := f.mustEnqueue(t, "acme", "job-1")

	_, again, err := f.client.Enqueue(context.Background(), "acme", asynq.NewTask("test", nil), asynq.TaskID("job-1"))
	if !errors.Is(err, asynq.ErrTaskIDConflict) {
		t.Fatalf("Enqueue of job-1 again: err = %v, want asynq.ErrTaskIDConflict", err)
	}
	want := first
	want.Existing = true
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("decision of the retry mismatch (-want,+got):\n%s", diff)
	}
	if got := f.usage(t, "acme"); got != 1 {
		t.Errorf("log holds %d entries, want 1: the retry must neither take a slot nor release the original", got)
	}
}

func TestEnqueueRunsAtTheLaterOfProcessAtAndSlot(t *testing.T) {
	// Limit 1 in 10s: the first task is admitted at base (…:00.25) and the
	// one under test gets the slot base+10s, rounded up to sec(11).
	q := admission.Quota{Limit: 1, Window: 10 * time.Second, MaxDelay: time.Hour}
	tests := []struct {
		desc      string
		fill      bool // enqueue a task first, so that the one under test is deferred
		task      *asynq.Task
		opts      []asynq.Option
		wantState asynq.TaskState
		wantAt    time.Time // zero: pending now
	}{
		{
			desc:      "admitted without ProcessAt: pending now",
			task:      asynq.NewTask("test", nil),
			wantState: asynq.TaskStatePending,
		},
		{
			desc:      "admitted with a later ProcessAt: the caller's time",
			task:      asynq.NewTask("test", nil),
			opts:      []asynq.Option{asynq.ProcessAt(sec(30))},
			wantState: asynq.TaskStateScheduled,
			wantAt:    sec(30),
		},
		{
			desc:      "admitted with a ProcessAt already past: pending now",
			task:      asynq.NewTask("test", nil),
			opts:      []asynq.Option{asynq.ProcessAt(time.Unix(1, 0))},
			wantState: asynq.TaskStatePending,
		},
		{
			desc:      "deferred without ProcessAt: the slot",
			fill:      true,
			task:      asynq.NewTask("test", nil),
			wantState: asynq.TaskStateScheduled,
			wantAt:    sec(11),
		},
		{
			desc:      "deferred, caller's ProcessAt earlier than the slot: the slot",
			fill:      true,
			task:      asynq.NewTask("test", nil),
			opts:      []asynq.Option{asynq.ProcessAt(sec(5))},
			wantState: asynq.TaskStateScheduled,
			wantAt:    sec(11),
		},
		{
			desc:      "deferred, caller's ProcessAt equal to the slot: the slot",
			fill:      true,
			task:      asynq.NewTask("test", nil),
			opts:      []asynq.Option{asynq.ProcessAt(sec(11))},
			wantState: asynq.TaskStateScheduled,
			wantAt:    sec(11),
		},
		{
			desc:      "deferred, caller's ProcessAt later than the slot: the caller's time",
			fill:      true,
			task:      asynq.NewTask("test", nil),
			opts:      []asynq.Option{asynq.ProcessAt(sec(30).Add(500 * time.Millisecond))},
			wantState: asynq.TaskStateScheduled,
			wantAt:    sec(30).Add(500 * time.Millisecond),
		},
		{
			desc:      "deferred, ProcessAt set on the task and later: the task's time",
			fill:      true,
			task:      asynq.NewTask("test", nil, asynq.ProcessAt(sec(40))),
			wantState: asynq.TaskStateScheduled,
			wantAt:    sec(40),
		},
		{
			desc:      "deferred, the Enqueue ProcessAt overrides the task's, then the slot wins",
			fill:      true,
			task:      asynq.NewTask("test", nil, asynq.ProcessAt(sec(40))),
			opts:      []asynq.Option{asynq.ProcessAt(sec(2))},
			wantState: asynq.TaskStateScheduled,
			wantAt:    sec(11),
		},
		{
			desc:      "deferred, caller's ProcessIn ends before the slot: the slot",
			fill:      true,
			task:      asynq.NewTask("test", nil),
			opts:      []asynq.Option{asynq.ProcessIn(time.Hour)}, // from the local clock, long before base
			wantState: asynq.TaskStateScheduled,
			wantAt:    sec(11),
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFixture(t, fixtureConfig{quota: q})
			if tc.fill {
				f.mustEnqueue(t, "acme", "fill")
			}
			before := time.Now()
			opts := append([]asynq.Option{asynq.TaskID("probe")}, tc.opts...)
			info, d, err := f.client.Enqueue(context.Background(), "acme", tc.task, opts...)
			if err != nil {
				t.Fatalf("Enqueue: %v", err)
			}
			if tc.wantAt.IsZero() {
				if info.NextProcessAt.Before(before) || info.NextProcessAt.After(time.Now()) {
					t.Errorf("NextProcessAt = %v, want the local time of the enqueue", info.NextProcessAt)
				}
			} else if !info.NextProcessAt.Equal(tc.wantAt) {
				t.Errorf("NextProcessAt = %v, want %v", info.NextProcessAt, tc.wantAt)
			}
			if info.State != tc.wantState {
				t.Errorf("State = %v, want %v", info.State, tc.wantState)
			}
			if d.Outcome == admission.Deferred && info.NextProcessAt.Before(d.At) {
				t.Errorf("NextProcessAt %v is before the slot %v", info.NextProcessAt, d.At)
			}
			if tc.wantState == asynq.TaskStateScheduled {
				// asynq promotes a task once the clock reaches its score.
				score, err := f.rdb.ZScore(context.Background(), "asynq:{default}:scheduled", "probe").Result()
				if err != nil {
					t.Fatalf("ZSCORE: %v", err)
				}
				if want := tc.wantAt.Unix(); int64(score) != want {
					t.Errorf("scheduled score = %v, want %v", int64(score), want)
				}
			}
		})
	}
}

func TestEnqueueProcessInLaterThanSlot(t *testing.T) {
	f := newFixture(t, fixtureConfig{quota: admission.Quota{Limit: 1, Window: 10 * time.Second, MaxDelay: time.Hour}})
	f.mustEnqueue(t, "acme", "fill")
	in := time.Until(sec(60))
	before := time.Now()
	info, d, err := f.client.Enqueue(context.Background(), "acme", asynq.NewTask("test", nil), asynq.ProcessIn(in))
	after := time.Now()
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if d.Outcome != admission.Deferred || !d.At.Equal(sec(11)) {
		t.Fatalf("decision = %v at %v, want deferred at %v", d.Outcome, d.At, sec(11))
	}
	if info.NextProcessAt.Before(before.Add(in)) || info.NextProcessAt.After(after.Add(in)) {
		t.Errorf("NextProcessAt = %v, want the caller's ProcessIn, within [%v, %v]", info.NextProcessAt, before.Add(in), after.Add(in))
	}
}

func TestDeferredSlotIsAWholeSecond(t *testing.T) {
	// The first task is admitted at base, …:00.25; the next one's slot
	// before rounding is base + Window.
	tests := []struct {
		desc     string
		gateOpts []admission.Option
		window   time.Duration
		wantGran time.Duration
	}{
		{desc: "a gate at the default 1µs is used at 1s", window: 2500 * time.Millisecond, wantGran: time.Second},
		{desc: "a gate at 500ms is used at 1s", gateOpts: []admission.Option{admission.WithGranularity(500 * time.Millisecond)}, window: 2500 * time.Millisecond, wantGran: time.Second},
		{desc: "a gate at 1.5s is used at 1s", gateOpts: []admission.Option{admission.WithGranularity(1500 * time.Millisecond)}, window: 2500 * time.Millisecond, wantGran: time.Second},
		{desc: "a gate at 2s keeps 2s", gateOpts: []admission.Option{admission.WithGranularity(2 * time.Second)}, window: 2500 * time.Millisecond, wantGran: 2 * time.Second},
		{desc: "a slot already on a whole second is not moved", window: 1750 * time.Millisecond, wantGran: time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFixture(t, fixtureConfig{
				quota:    admission.Quota{Limit: 1, Window: tc.window, MaxDelay: time.Minute},
				gateOpts: tc.gateOpts,
			})
			first := f.mustEnqueue(t, "acme", "first")
			info, d, err := f.client.Enqueue(context.Background(), "acme", asynq.NewTask("test", nil), asynq.TaskID("second"))
			if err != nil {
				t.Fatalf("Enqueue: %v", err)
			}
			unrounded := first.At.Add(tc.window)
			want := unrounded.Truncate(tc.wantGran)
			if want.Before(unrounded) {
				want = want.Add(tc.wantGran)
			}
			type slot struct {
				Outcome       admission.Outcome
				At, NextRunAt time.Time
				Score         int64
			}
			score, err := f.rdb.ZScore(context.Background(), "asynq:{default}:scheduled", "second").Result()
			if err != nil {
				t.Fatalf("ZSCORE: %v", err)
			}
			got := slot{d.Outcome, d.At, info.NextProcessAt, int64(score)}
			if diff := cmp.Diff(slot{admission.Deferred, want, want, want.Unix()}, got); diff != "" {
				t.Errorf("slot mismatch (-want,+got):\n%s", diff)
			}
			if d.At.Before(unrounded) {
				t.Errorf("slot %v is before the unrounded slot %v", d.At, unrounded)
			}
		})
	}
}

func TestEnqueueStampsTheTenant(t *testing.T) {
	baseMilli := strconv.FormatInt(base.UnixMilli(), 10) // admitted at once: the slot is the decision's time
	tests := []struct {
		desc        string
		headers     map[string]string
		wantHeaders map[string]string
	}{
		{
			desc:        "a task without headers gets the tenant header",
			wantHeaders: map[string]string{enqueue.TenantHeader: "acme", enqueue.SlotHeader: baseMilli},
		},
		{
			desc:        "the caller's headers are kept",
			headers:     map[string]string{"trace-id": "abc", "lang": "de"},
			wantHeaders: map[string]string{"trace-id": "abc", "lang": "de", enqueue.TenantHeader: "acme", enqueue.SlotHeader: baseMilli},
		},
		{
			desc:        "tenant and slot headers set by the caller are replaced by the admitted tenant and its slot",
			headers:     map[string]string{enqueue.TenantHeader: "someone-else", enqueue.SlotHeader: "1"},
			wantHeaders: map[string]string{enqueue.TenantHeader: "acme", enqueue.SlotHeader: baseMilli},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFixture(t, fixtureConfig{quota: roomy})
			task := asynq.NewTaskWithHeaders("test", []byte("payload"), tc.headers,
				asynq.Queue("critical"), asynq.MaxRetry(3), asynq.TaskID("job"))
			origHeaders := task.Headers()
			if _, _, err := f.client.Enqueue(context.Background(), "acme", task, asynq.Timeout(time.Minute)); err != nil {
				t.Fatalf("Enqueue: %v", err)
			}
			info, err := f.inspector.GetTaskInfo("critical", "job")
			if err != nil {
				t.Fatalf("GetTaskInfo: %v (the task's own Queue option was lost?)", err)
			}
			type stored struct {
				Type     string
				Payload  string
				Headers  map[string]string
				MaxRetry int
				Timeout  time.Duration
			}
			got := stored{info.Type, string(info.Payload), info.Headers, info.MaxRetry, info.Timeout}
			want := stored{"test", "payload", tc.wantHeaders, 3, time.Minute}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("stored task mismatch (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(origHeaders, task.Headers()); diff != "" {
				t.Errorf("the caller's task was modified (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestEnqueueRejectedEnqueuesNothing(t *testing.T) {
	f := newFixture(t, fixtureConfig{quota: admission.Quota{Limit: 1, Window: 10 * time.Second}})
	f.mustEnqueue(t, "acme", "first")

	info, d, err := f.client.Enqueue(context.Background(), "acme", asynq.NewTask("test", nil), asynq.TaskID("second"))
	if !errors.Is(err, enqueue.ErrRejected) {
		t.Fatalf("err = %v, want ErrRejected", err)
	}
	var rej *enqueue.RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("err = %T, want *RejectedError", err)
	}
	if info != nil {
		t.Errorf("info = %+v, want nil", info)
	}
	if diff := cmp.Diff(d, rej.Decision); diff != "" {
		t.Errorf("RejectedError.Decision differs from the returned one (-want,+got):\n%s", diff)
	}
	// Redis would admit again at base+10s. The gate may answer from its
	// deny cache, whose Now moves on with the local clock, so RetryAfter is
	// measured from the decision's own Now.
	if !d.At.Equal(base.Add(10 * time.Second)) {
		t.Errorf("rejection At = %v, want %v", d.At, base.Add(10*time.Second))
	}
	if got, want := rej.RetryAfter(), d.At.Sub(d.Now); got != want || got <= 0 || got > 10*time.Second {
		t.Errorf("RetryAfter() = %v, want At - Now = %v, in (0, 10s]", got, want)
	}
	pending, scheduled := f.queued(t, "default")
	if diff := cmp.Diff([]string{"first"}, append(pending, scheduled...)); diff != "" {
		t.Errorf("queue mismatch (-want,+got):\n%s", diff)
	}
	if got := f.usage(t, "acme"); got != 1 {
		t.Errorf("log holds %d entries, want 1", got)
	}
}

func TestRejectedError(t *testing.T) {
	now := time.Date(2030, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		desc    string
		at      time.Time
		want    time.Duration
		wantMsg string
	}{
		{
			desc:    "RetryAfter is the time from the decision to At",
			at:      now.Add(1500 * time.Millisecond),
			want:    1500 * time.Millisecond,
			wantMsg: `enqueue: tenant "acme" rejected, over quota: retry after 1.5s (at 2030-05-01T12:00:01.5Z)`,
		},
		{
			desc:    "RetryAfter is zero, never negative, for an At already past",
			at:      now.Add(-time.Second),
			want:    0,
			wantMsg: `enqueue: tenant "acme" rejected, over quota: retry after 0s (at 2030-05-01T11:59:59Z)`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var err error = &enqueue.RejectedError{Decision: admission.Decision{
				Tenant: "acme", Outcome: admission.Rejected, Now: now, At: tc.at,
			}}
			var rej *enqueue.RejectedError
			if !errors.As(fmt.Errorf("wrapped: %w", err), &rej) {
				t.Fatal("errors.As(wrapped, *RejectedError) = false")
			}
			type got struct {
				RetryAfter  time.Duration
				Msg         string
				IsRejected  bool
				IsOtherwise bool
			}
			g := got{rej.RetryAfter(), err.Error(), errors.Is(err, enqueue.ErrRejected), errors.Is(err, admission.ErrUnavailable)}
			if diff := cmp.Diff(got{tc.want, tc.wantMsg, true, false}, g); diff != "" {
				t.Errorf("mismatch (-want,+got):\n%s", diff)
			}
		})
	}
}

func TestEnqueueFailureReleasesTheSlot(t *testing.T) {
	// Each case enqueues "first", then "probe", whose asynq enqueue fails.
	// The log must then hold wantEntries: 1 if probe's slot was released.
	tests := []struct {
		desc        string
		probeTask   *asynq.Task
		probeOpts   []asynq.Option
		cancelAsynq bool // cancel the context as asynq starts its enqueue
		aroundGate  bool // enqueue first with asynq directly, so it has no entry
		firstTask   *asynq.Task
		wantErr     error
		wantEntries int
	}{
		{
			desc:        "a duplicate (asynq.Unique) releases its slot",
			firstTask:   asynq.NewTask("same", []byte("x"), asynq.Unique(time.Hour)),
			probeTask:   asynq.NewTask("same", []byte("x"), asynq.Unique(time.Hour)),
			wantErr:     asynq.ErrDuplicateTask,
			wantEntries: 1,
		},
		{
			desc:        "a context cancelled after admission releases its slot",
			firstTask:   asynq.NewTask("test", nil),
			probeTask:   asynq.NewTask("test", nil),
			cancelAsynq: true,
			wantErr:     context.Canceled,
			wantEntries: 1,
		},
		{
			desc:        "an option asynq refuses releases its slot",
			firstTask:   asynq.NewTask("test", nil),
			probeTask:   asynq.NewTask("test", nil),
			probeOpts:   []asynq.Option{asynq.Unique(time.Millisecond)},
			wantEntries: 1,
		},
		{
			desc:        "a TaskIDConflict keeps the slot of the task already in asynq",
			firstTask:   asynq.NewTask("test", nil),
			probeTask:   asynq.NewTask("test", nil),
			probeOpts:   []asynq.Option{asynq.TaskID("first")},
			wantErr:     asynq.ErrTaskIDConflict,
			wantEntries: 1,
		},
		{
			// The entry is new, yet it may belong to a concurrent attempt at
			// the same ID that did enqueue the task, so it is kept too.
			desc:        "a TaskIDConflict keeps the slot even when this call took it",
			aroundGate:  true,
			firstTask:   asynq.NewTask("test", nil),
			probeTask:   asynq.NewTask("test", nil),
			probeOpts:   []asynq.Option{asynq.TaskID("first")},
			wantErr:     asynq.ErrTaskIDConflict,
			wantEntries: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := fixtureConfig{quota: roomy}
			hook := &cancelHook{}
			cfg.asynqHook = hook
			f := newFixture(t, cfg)
			if tc.aroundGate {
				if _, err := f.asynq.Enqueue(tc.firstTask, asynq.TaskID("first")); err != nil {
					t.Fatalf("asynq Enqueue(first): %v", err)
				}
			} else if _, _, err := f.client.Enqueue(ctx, "acme", tc.firstTask, asynq.TaskID("first")); err != nil {
				t.Fatalf("Enqueue(first): %v", err)
			}
			if tc.cancelAsynq {
				hook.arm(cancel)
			}
			opts := append([]asynq.Option{asynq.TaskID("probe")}, tc.probeOpts...)
			info, d, err := f.client.Enqueue(ctx, "acme", tc.probeTask, opts...)
			if err == nil {
				t.Fatalf("Enqueue(probe) = %+v, want an error", info)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want errors.Is %v", err, tc.wantErr)
			}
			if d.Outcome != admission.Admitted {
				t.Errorf("decision = %v, want admitted", d.Outcome)
			}
			if got := f.usage(t, "acme"); got != tc.wantEntries {
				t.Errorf("log holds %d entries, want %d", got, tc.wantEntries)
			}
			pending, _ := f.queued(t, "default")
			if diff := cmp.Diff([]string{"first"}, pending); diff != "" {
				t.Errorf("queue mismatch (-want,+got):\n%s", diff)
			}
		})
	}
}
