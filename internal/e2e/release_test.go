package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
)

// TestSlotRelease makes the asynq enqueue fail after admission and checks
// whether the slot was given back: it must be, unless the failure is a
// TaskIDConflict, whose task is already in the queue and owns the slot.
func TestSlotRelease(t *testing.T) {
	t.Parallel()
	tests := []struct {
		desc string
		// first is enqueued through the gate; then probe, as task ID "probe"
		// plus probeOpts, whose enqueue fails with wantErr.
		first       *asynq.Task
		probe       *asynq.Task
		probeOpts   []asynq.Option
		cancel      bool // cancel the context as asynq starts enqueueing probe
		wantErr     error
		wantEntries int
	}{
		{
			desc:        "a duplicate (asynq.Unique) gives its slot back",
			first:       asynq.NewTask("report", []byte("acme-2024"), asynq.Unique(time.Hour)),
			probe:       asynq.NewTask("report", []byte("acme-2024"), asynq.Unique(time.Hour)),
			wantErr:     asynq.ErrDuplicateTask,
			wantEntries: 1,
		},
		{
			desc:        "a context cancelled after admission gives its slot back",
			first:       asynq.NewTask("work", nil),
			probe:       asynq.NewTask("work", nil),
			cancel:      true,
			wantErr:     context.Canceled,
			wantEntries: 1,
		},
		{
			desc:        "a TaskIDConflict keeps the original's slot",
			first:       asynq.NewTask("work", nil),
			probe:       asynq.NewTask("work", nil),
			probeOpts:   []asynq.Option{asynq.TaskID("first")},
			wantErr:     asynq.ErrTaskIDConflict,
			wantEntries: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			// Limit 2: if the probe's slot is released, the next task is
			// admitted now; if it leaked, the next one is deferred.
			q := admission.Quota{Limit: 2, Window: time.Minute, MaxDelay: time.Hour}
			hook := &cancelHook{}
			s := newStack(t, admission.StaticQuotas{Default: &q}, hook)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()

			_, first, err := s.client.Enqueue(ctx, "acme", tc.first, asynq.TaskID("first"))
			if err != nil {
				t.Fatalf("Enqueue(first): %v", err)
			}
			if tc.cancel {
				hook.arm(cancel)
			}
			opts := append([]asynq.Option{asynq.TaskID("probe")}, tc.probeOpts...)
			info, d, err := s.client.Enqueue(ctx, "acme", tc.probe, opts...)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Enqueue(probe) = %v, %v; want an error matching %v", info, err, tc.wantErr)
			}
			if d.Outcome != admission.Admitted {
				t.Errorf("probe was %v, want admitted", d.Outcome)
			}
			if got := s.entries(t, "acme"); got != tc.wantEntries {
				t.Errorf("the log holds %d entries, want %d", got, tc.wantEntries)
			}
			if diff := cmp.Diff(map[string]bool{"first": true}, s.queued(t, "default")); diff != "" {
				t.Errorf("queue mismatch (-want,+got):\n%s", diff)
			}

			// The freed slot, or the one left, goes to the next task.
			_, next, err := s.client.Enqueue(context.Background(), "acme", asynq.NewTask("work", []byte("next")), asynq.TaskID("next"))
			if err != nil {
				t.Fatalf("Enqueue(next): %v", err)
			}
			if next.Outcome != admission.Admitted {
				t.Errorf("next was %v at %v, want admitted: the probe's slot was not given back", next.Outcome, next.At)
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
