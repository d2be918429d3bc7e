package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestSlotRelease makes the asynq enqueue fail after admission and checks
// whether the slot was given back: it must be when the failure shows that
// asynq wrote nothing (a duplicate refused by asynq.Unique), and must not
// be when the task may be in the queue: a context that ends while asynq
// waits for Redis (the write may have reached it), or a TaskIDConflict,
// whose task is already in the queue and owns the slot.
func TestSlotRelease(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		// first is enqueued through the gate; then probe, as task ID "probe"
		// plus probeOpts, whose enqueue fails with wantErr.
		first     *asynq.Task
		probe     *asynq.Task
		probeOpts []asynq.Option
		cancel    bool // cancel the context as asynq starts enqueueing probe
		wantErr   error
		// released says whether the probe holds no slot afterwards: it gave
		// its slot back, or never took one. A kept slot is found again by a
		// retry of the probe.
		released bool
	}{
		{
			desc:     "a duplicate (asynq.Unique) gives its slot back",
			first:    asynq.NewTask("report", []byte("acme-2024"), asynq.Unique(time.Hour)),
			probe:    asynq.NewTask("report", []byte("acme-2024"), asynq.Unique(time.Hour)),
			wantErr:  asynq.ErrDuplicateTask,
			released: true,
		},
		{
			// The hook cancels just before asynq's command, so the command
			// never leaves the client; but a Client made by New cannot see
			// that, and a context that ends while asynq waits for Redis is
			// ambiguous.
			desc:    "a context cancelled while asynq enqueues keeps its slot",
			first:   asynq.NewTask("work", nil),
			probe:   asynq.NewTask("work", nil),
			cancel:  true,
			wantErr: context.Canceled,
		},
		{
			desc:      "a TaskIDConflict keeps the original's slot",
			first:     asynq.NewTask("work", nil),
			probe:     asynq.NewTask("work", nil),
			probeOpts: []asynq.Option{asynq.TaskID("first")},
			wantErr:   asynq.ErrTaskIDConflict,
			released:  true, // the probe took no slot of its own: it is "first"
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			// Limit 2: if the probe's slot is released, the next task is
			// admitted now; if it leaked, the next one is deferred.
			q := admission.Quota{Limit: 2, Window: time.Minute, MaxDelay: time.Hour}
			hook := &redistest.CancelHook{}
			cfg := stackConfig{quotas: admission.StaticQuotas{Default: &q}, hooks: []redis.Hook{hook}}
			// NewFromRedis sends a write whose ctx was live when it left
			// whatever happens to the ctx after, and waits for its reply:
			// the cancellation must reach asynq's own call, as with New.
			cfg.plain = tc.cancel
			s := buildStack(t, serverBackend(t), cfg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			_, first, err := s.client.Enqueue(ctx, "acme", tc.first, asynq.TaskID("first"))
			if err != nil {
				t.Fatalf("Enqueue(first): %v", err)
			}
			if tc.cancel {
				hook.Arm(cancel)
			}
			opts := append([]asynq.Option{asynq.TaskID("probe")}, tc.probeOpts...)
			info, d, err := s.client.Enqueue(ctx, "acme", tc.probe, opts...)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Enqueue(probe) = %v, %v; want an error matching %v", info, err, tc.wantErr)
			}
			if d.Outcome != admission.Admitted {
				t.Errorf("probe was %v, want admitted", d.Outcome)
			}
			wantEntries := 2
			if tc.released {
				wantEntries = 1
			}
			if got := s.entries(t, "acme"); got != wantEntries {
				t.Errorf("the log holds %d entries, want %d", got, wantEntries)
			}
			if diff := cmp.Diff(map[string]bool{"first": true}, s.queued(t, "default")); diff != "" {
				t.Errorf("queue mismatch (-want,+got):\n%s", diff)
			}

			// The freed slot, if any, goes to the next task; a kept one
			// pushes it past the limit.
			_, next, err := s.client.Enqueue(context.Background(), "acme", asynq.NewTask("work", []byte("next")), asynq.TaskID("next"))
			if err != nil {
				t.Fatalf("Enqueue(next): %v", err)
			}
			if want := map[bool]admission.Outcome{true: admission.Admitted, false: admission.Deferred}[tc.released]; next.Outcome != want {
				t.Errorf("next was %v at %v, want %v (probe's slot released: %v)", next.Outcome, next.At, want, tc.released)
			}
			if !tc.released {
				// The kept slot is the probe's own: a retry takes no other.
				_, again, err := s.client.Enqueue(context.Background(), "acme", tc.probe, opts...)
				if err != nil || !again.Existing || !again.At.Equal(d.At) {
					t.Errorf("retry of probe = %v at %v (existing %v), %v; want enqueued in its kept slot %v",
						again.Outcome, again.At, again.Existing, err, d.At)
				}
			}
			// A retry of the original still finds its own slot.
			_, again, err := s.client.Enqueue(context.Background(), "acme", asynq.NewTask("work", nil), asynq.TaskID("first"))
			if !errors.Is(err, asynq.ErrTaskIDConflict) || !again.Existing || !again.At.Equal(first.At) {
				t.Errorf("retry of first = %v at %v (existing %v), %v; want its original slot %v and asynq.ErrTaskIDConflict",
					again.Outcome, again.At, again.Existing, err, first.At)
			}
		})
	}
}

// TestSlotReleaseCancelledBeforeAsynq ends the context after admission but
// before asynq is called: a batch of two is admitted in one round trip, and
// the context is cancelled once asynq has written the first task. The
// second is then not handed to asynq at all, so its slot must be given
// back, and its error must match context.Canceled.
func TestSlotReleaseCancelledBeforeAsynq(t *testing.T) {
	t.Parallel()
	q := admission.Quota{Limit: 2, Window: time.Minute, MaxDelay: time.Hour}
	hook := &redistest.ScriptDoneHook{}
	s := newStack(t, admission.StaticQuotas{Default: &q}, hook)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hook.Arm(cancel)

	rs, err := s.enqueueBatch(ctx, "acme", []*asynq.Task{
		asynq.NewTask("work", nil, asynq.TaskID("b0")),
		asynq.NewTask("work", nil, asynq.TaskID("b1")),
	})
	if err != nil {
		t.Fatalf("EnqueueBatch: %v", err)
	}
	if rs[0].Err != nil {
		t.Errorf("b0: %v, want enqueued", rs[0].Err)
	}
	if !errors.Is(rs[1].Err, context.Canceled) || rs[1].Decision.Outcome != admission.Admitted {
		t.Errorf("b1 = %v, %v; want admitted, then context.Canceled", rs[1].Decision.Outcome, rs[1].Err)
	}
	if n := hook.After(); n != 0 {
		t.Errorf("asynq sent %d commands after the context was done, want none", n)
	}
	if got := s.entries(t, "acme"); got != 1 {
		t.Errorf("the log holds %d entries, want 1 (b0)", got)
	}
	if diff := cmp.Diff(map[string]bool{"b0": true}, s.queued(t, s.queue)); diff != "" {
		t.Errorf("queue mismatch (-want,+got):\n%s", diff)
	}
}
