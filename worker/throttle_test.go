package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/worker"
)

func TestThrottledErrorIsFoundThroughWrapping(t *testing.T) {
	err := fmt.Errorf("calling billing for acme: %w", worker.Throttled(1500*time.Millisecond))
	var te *worker.ThrottledError
	if !errors.As(err, &te) {
		t.Fatalf("errors.As(%v, *ThrottledError) = false, want true", err)
	}
	if te.RetryAfter != 1500*time.Millisecond {
		t.Errorf("RetryAfter = %v, want 1.5s", te.RetryAfter)
	}
	if got := te.Error(); !strings.Contains(got, "throttled") || !strings.Contains(got, "1.5s") {
		t.Errorf("Error() = %q, want it to say throttled and 1.5s", got)
	}
}

// TestThrottledRetriesWithoutFailure runs one task that fails once and then
// succeeds, and checks what asynq recorded. The throttled cases must look
// like a task that never failed; the plain error is the control that shows
// the same checks do see a failure.
func TestThrottledRetriesWithoutFailure(t *testing.T) {
	const throttle = 2 * time.Second
	tests := []struct {
		desc          string
		firstErr      error
		wantRetried   int // asynq's retry count for the task
		wantFailed    int // queue's failed count for today
		wantProcessed int // queue's processed count for today
	}{
		{
			desc:          "Throttled is retried after RetryAfter and not counted",
			firstErr:      worker.Throttled(throttle),
			wantProcessed: 1,
		},
		{
			desc:          "wrapped Throttled is retried after RetryAfter and not counted",
			firstErr:      fmt.Errorf("billing says slow down: %w", worker.Throttled(throttle)),
			wantProcessed: 1,
		},
		{
			desc:          "plain error is counted as a failure",
			firstErr:      errors.New("billing is down"),
			wantRetried:   1,
			wantFailed:    1,
			wantProcessed: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			var (
				attempts  atomic.Int32
				firstAt   = make(chan time.Time, 1)
				secondAt  = make(chan time.Time, 1)
				throttled = errors.As(tc.firstErr, new(*worker.ThrottledError))
			)
			cfg := testConfig(t)
			// DelayedTaskCheckInterval stays at its default (1s): the
			// timing below is what a real deployment gets.
			cfg.RetryDelayFunc = func(int, error, *asynq.Task) time.Duration { return 0 }
			e.start(t, cfg, func(ctx context.Context, task *asynq.Task) error {
				if attempts.Add(1) == 1 {
					firstAt <- time.Now()
					return tc.firstErr
				}
				secondAt <- time.Now()
				return nil
			})
			// Retention keeps the completed task's info to inspect.
			info := e.enqueue(t, tenantTask("charge", "acme"), asynq.Retention(time.Hour))
			t0 := receive(t, "the first attempt", firstAt)

			if throttled {
				// While it waits, the task must be scheduled no earlier than
				// RetryAfter: asynq keeps whole seconds, the Worker rounds up.
				var ti *asynq.TaskInfo
				poll(t, "the task to wait for its retry", func() bool {
					var err error
					ti, err = e.inspector.GetTaskInfo(info.Queue, info.ID)
					return err == nil && ti.State == asynq.TaskStateRetry
				})
				// The slack covers the moment between the handler's return
				// and asynq's call of RetryDelayFunc.
				earliest := t0.Add(throttle)
				if ti.NextProcessAt.Before(earliest) || ti.NextProcessAt.After(earliest.Add(time.Second+250*time.Millisecond)) {
					t.Errorf("retry scheduled at %v, want the first whole second at or after %v", ti.NextProcessAt, earliest)
				}
				if ti.Retried != 0 {
					t.Errorf("while waiting, Retried = %d, want 0", ti.Retried)
				}
			}

			t1 := receive(t, "the second attempt", secondAt)
			if throttled {
				// No earlier than RetryAfter. No later than RetryAfter plus
				// the rounding up to a whole second, one
				// DelayedTaskCheckInterval, and a second of slack for a
				// loaded machine under -race (runs take about 3 s).
				lo := throttle
				hi := throttle + time.Second + worker.DefaultDelayedTaskCheckInterval + time.Second
				d := t1.Sub(t0)
				if d < lo || d > hi {
					t.Errorf("retried %v after the throttle, want between %v and %v", d, lo, hi)
				}
				t.Logf("retried %v after Throttled(%v)", d, throttle)
			}

			var ti *asynq.TaskInfo
			poll(t, "the task to complete", func() bool {
				var err error
				ti, err = e.inspector.GetTaskInfo(info.Queue, info.ID)
				return err == nil && ti.State == asynq.TaskStateCompleted
			})
			if ti.Retried != tc.wantRetried {
				t.Errorf("task Retried = %d, want %d", ti.Retried, tc.wantRetried)
			}
			q, err := e.inspector.GetQueueInfo(info.Queue)
			if err != nil {
				t.Fatalf("GetQueueInfo: %v", err)
			}
			got := fmt.Sprintf("processed=%d failed=%d processed_total=%d failed_total=%d",
				q.Processed, q.Failed, q.ProcessedTotal, q.FailedTotal)
			want := fmt.Sprintf("processed=%d failed=%d processed_total=%d failed_total=%d",
				tc.wantProcessed, tc.wantFailed, tc.wantProcessed, tc.wantFailed)
			if got != want {
				t.Errorf("queue stats: got %s, want %s", got, want)
			}
		})
	}
}
