package enqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
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

// TestEnqueueProcessInLaterThanSlot: a task whose ProcessIn ends after the
// slot it would get now is charged for its own time, to the second asynq
// runs it at (issue 11, A3), not for the slot at base+10s.
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
	if d.Outcome != admission.Deferred || !d.At.Equal(sec(60)) {
		t.Fatalf("decision = %v at %v, want deferred at %v, the second asynq runs it at", d.Outcome, d.At, sec(60))
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
	// The slot is released only when the failure shows that asynq wrote
	// nothing: the log must then hold 1 entry, and 2 if the slot was kept.
	tests := []struct {
		desc      string
		probeTask *asynq.Task
		probeOpts []asynq.Option
		// cancelAsynq cancels the context as asynq starts its enqueue. It
		// needs a Client made by New: NewFromRedis sends a write whose ctx
		// was live when it left on a context of its own, and waits for its
		// reply.
		cancelAsynq bool
		aroundGate  bool // enqueue first with asynq directly, so it has no entry
		// breakKey, when set, is made a string before the probe, so that
		// asynq's command on it fails with a WRONGTYPE reply; it is deleted
		// again before the checks.
		breakKey      string
		firstTask     *asynq.Task
		wantErr       error
		wantAmbiguous bool
		wantEntries   int
	}{
		{
			desc:        "a duplicate (asynq.Unique) releases its slot",
			firstTask:   asynq.NewTask("same", []byte("x"), asynq.Unique(time.Hour)),
			probeTask:   asynq.NewTask("same", []byte("x"), asynq.Unique(time.Hour)),
			wantErr:     asynq.ErrDuplicateTask,
			wantEntries: 1,
		},
		{
			// The hook cancels just before asynq's command, which then
			// fails. Here it never left the client, but Enqueue cannot know
			// that: a context that ends while asynq waits for Redis may end
			// after the write reached Redis, so the failure is ambiguous and
			// the slot stays with the task that may be in the queue.
			desc:          "a context cancelled while asynq enqueues keeps the slot",
			firstTask:     asynq.NewTask("test", nil),
			probeTask:     asynq.NewTask("test", nil),
			cancelAsynq:   true,
			wantErr:       context.Canceled,
			wantAmbiguous: true,
			wantEntries:   2,
		},
		{
			// asynq records each new queue's name (SADD asynq:queues) before
			// it writes the task, and keeps the Redis error of that call.
			desc:        "a Redis error reply before asynq's write releases its slot",
			firstTask:   asynq.NewTask("test", nil),
			probeTask:   asynq.NewTask("test", nil),
			probeOpts:   []asynq.Option{asynq.Queue("other")},
			breakKey:    "asynq:queues",
			wantErr:     errRedisReply,
			wantEntries: 1,
		},
		{
			// asynq flattens its script's errors into text, and a script
			// that fails part-way has made its earlier writes (here, the
			// task's hash): the failure is ambiguous.
			desc:          "a Redis error reply from asynq's script keeps the slot",
			firstTask:     asynq.NewTask("test", nil),
			probeTask:     asynq.NewTask("test", nil),
			probeOpts:     []asynq.Option{asynq.Queue("other")},
			breakKey:      "asynq:{other}:pending",
			wantAmbiguous: true,
			wantEntries:   2,
		},
		{
			desc:          "a TaskIDConflict keeps the slot of the task already in asynq",
			firstTask:     asynq.NewTask("test", nil),
			probeTask:     asynq.NewTask("test", nil),
			probeOpts:     []asynq.Option{asynq.TaskID("first")},
			wantErr:       asynq.ErrTaskIDConflict,
			wantAmbiguous: true,
			wantEntries:   1,
		},
		{
			// The entry is new, yet it may belong to a concurrent attempt at
			// the same ID that did enqueue the task, so it is kept too.
			desc:          "a TaskIDConflict keeps the slot even when this call took it",
			aroundGate:    true,
			firstTask:     asynq.NewTask("test", nil),
			probeTask:     asynq.NewTask("test", nil),
			probeOpts:     []asynq.Option{asynq.TaskID("first")},
			wantErr:       asynq.ErrTaskIDConflict,
			wantAmbiguous: true,
			wantEntries:   1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := fixtureConfig{quota: roomy}
			cfg.plain = tc.cancelAsynq
			hook := &redistest.CancelHook{}
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
				hook.Arm(cancel)
			}
			var saved []string
			if tc.breakKey != "" {
				saved, _ = f.mr.Members(tc.breakKey) // asynq:queues is a set
				f.mr.Del(tc.breakKey)
				if err := f.mr.Set(tc.breakKey, "not a "+tc.breakKey); err != nil {
					t.Fatal(err)
				}
			}
			opts := append([]asynq.Option{asynq.TaskID("probe")}, tc.probeOpts...)
			info, d, err := f.client.Enqueue(ctx, "acme", tc.probeTask, opts...)
			if tc.breakKey != "" {
				f.mr.Del(tc.breakKey)
				if len(saved) > 0 {
					if _, err := f.mr.SetAdd(tc.breakKey, saved...); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err == nil {
				t.Fatalf("Enqueue(probe) = %+v, want an error", info)
			}
			if tc.wantErr == errRedisReply {
				var rerr redis.Error
				if !errors.As(err, &rerr) {
					t.Errorf("err = %v, want a redis.Error in its chain", err)
				}
			} else if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want errors.Is %v", err, tc.wantErr)
			}
			if enqueue.IsAmbiguous(err) != tc.wantAmbiguous {
				t.Errorf("IsAmbiguous(%v) = %v, want %v", err, !tc.wantAmbiguous, tc.wantAmbiguous)
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

// errRedisReply stands for "a redis.Error" in the wantErr of a test case.
var errRedisReply = errors.New("a redis.Error")

// TestEnqueueCancelledBeforeAsynq cancels the context between admission
// and asynq: a batch of three is admitted in one round trip, and the
// context ends once asynq has written the first task. Enqueue must not call
// asynq for the others, and must give back the slot of each that this call
// took; the one an earlier attempt took (Existing) stays.
func TestEnqueueCancelledBeforeAsynq(t *testing.T) {
	hook := &redistest.ScriptDoneHook{}
	f := newFixture(t, fixtureConfig{quota: roomy, asynqHook: hook})
	// An earlier attempt at "b1" took its slot but never reached asynq.
	if _, err := f.gate.AdmitID(context.Background(), "acme", "b1"); err != nil {
		t.Fatalf("AdmitID(b1): %v", err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	cause := errors.New("the caller gave up")
	hook.Arm(func() { cancel(cause) })

	tasks := []*asynq.Task{
		asynq.NewTask("test", nil, asynq.TaskID("b0")),
		asynq.NewTask("test", nil, asynq.TaskID("b1")),
		asynq.NewTask("test", nil, asynq.TaskID("b2")),
	}
	rs, err := f.client.EnqueueBatch(ctx, "acme", tasks)
	if err != nil {
		t.Fatalf("EnqueueBatch: %v", err)
	}
	if !hook.Fired() {
		t.Fatal("the context was never cancelled")
	}
	if rs[0].Err != nil {
		t.Errorf("b0: %v, want enqueued", rs[0].Err)
	}
	for i, r := range rs[1:] {
		switch {
		case !errors.Is(r.Err, context.Canceled) || !errors.Is(r.Err, cause):
			t.Errorf("b%d: err = %v, want one matching context.Canceled and the cause", i+1, r.Err)
		case r.Decision.Outcome != admission.Admitted:
			t.Errorf("b%d: decision = %v, want admitted", i+1, r.Decision.Outcome)
		}
	}
	if !rs[1].Decision.Existing || rs[2].Decision.Existing {
		t.Errorf("existing = %v, %v; want true for b1 only", rs[1].Decision.Existing, rs[2].Decision.Existing)
	}
	if n := hook.After(); n != 0 {
		t.Errorf("asynq sent %d commands after the context was done, want none", n)
	}
	pending, scheduled := f.queued(t, "default")
	if diff := cmp.Diff([]string{"b0"}, append(pending, scheduled...)); diff != "" {
		t.Errorf("queue mismatch (-want,+got):\n%s", diff)
	}
	// b0's slot and b1's (taken by the earlier attempt) remain; b2's went back.
	if got := f.usage(t, "acme"); got != 2 {
		t.Errorf("log holds %d entries, want 2 (b0, b1)", got)
	}
}

// TestEnqueueReleaseFailure makes the Release after a definite failure fail
// too: the error must still match asynq's error, and not the gate's
// admission.ErrUnavailable, which says the task was not admitted.
func TestEnqueueReleaseFailure(t *testing.T) {
	f := newFixture(t, fixtureConfig{quota: roomy, gateHook: redistest.FailHook{Name: "zrem"}})
	task := asynq.NewTask("same", []byte("x"), asynq.Unique(time.Hour))
	if _, _, err := f.client.Enqueue(context.Background(), "acme", task, asynq.TaskID("first")); err != nil {
		t.Fatalf("Enqueue(first): %v", err)
	}
	_, d, err := f.client.Enqueue(context.Background(), "acme", task, asynq.TaskID("probe"))
	if !errors.Is(err, asynq.ErrDuplicateTask) {
		t.Fatalf("Enqueue(probe) = %v, want asynq.ErrDuplicateTask", err)
	}
	if errors.Is(err, admission.ErrUnavailable) {
		t.Errorf("err = %v matches admission.ErrUnavailable", err)
	}
	if !strings.Contains(err.Error(), "releasing its slot failed too") {
		t.Errorf("err = %v, want it to say that the release failed", err)
	}
	if d.Outcome != admission.Admitted || d.Existing {
		t.Errorf("decision = %+v, want admitted by this call", d)
	}
	if got := f.usage(t, "acme"); got != 2 {
		t.Errorf("log holds %d entries, want 2: the release failed", got)
	}
}

// TestAZeroClientRefusesToEnqueue: a Client not made by New or
// NewFromRedis (its zero value, or nil) answers Enqueue and EnqueueBatch
// with an error and WhyParked as when it cannot tell, not with a panic,
// and a nil *RejectedError retries after 0.
func TestAZeroClientRefusesToEnqueue(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]*enqueue.Client{"zero": {}, "nil": nil} {
		if _, d, err := c.Enqueue(ctx, "acme", asynq.NewTask("x", nil)); err == nil || !strings.Contains(err.Error(), "not made by New") || d.Outcome != 0 {
			t.Errorf("%s Client: Enqueue = %v, %v; want an error naming New", name, d.Outcome, err)
		}
		if rs, err := c.EnqueueBatch(ctx, "acme", []*asynq.Task{asynq.NewTask("x", nil)}); err == nil || rs != nil {
			t.Errorf("%s Client: EnqueueBatch = %v, %v; want an error", name, rs, err)
		}
		if why := c.WhyParked(ctx, &asynq.TaskInfo{ID: "a", Queue: "default"}); !strings.HasPrefix(why, "parked: ") {
			t.Errorf("%s Client: WhyParked = %q, want the reading it gives when it cannot tell", name, why)
		}
	}
	var rej *enqueue.RejectedError
	if got := rej.RetryAfter(); got != 0 {
		t.Errorf("nil RejectedError: RetryAfter() = %v, want 0", got)
	}
	if msg := rej.Error(); !strings.Contains(msg, "rejected") {
		t.Errorf("nil RejectedError: Error() = %q", msg)
	}
}
