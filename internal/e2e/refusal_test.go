package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
)

// TestRefusal floods one tenant, from several producers at once, far past
// what its small MaxDelay can defer. Nothing is lost: every task is either
// enqueued or refused with an error, and the queue holds exactly the
// enqueued ones.
func TestRefusal(t *testing.T) {
	t.Parallel()
	const (
		limit     = 5
		sent      = 60
		producers = 4
	)
	q := admission.Quota{Limit: limit, Window: time.Second, MaxDelay: 2 * time.Second}
	s := newStack(t, admission.StaticQuotas{Default: &q})
	ctx := context.Background()

	var (
		mu       sync.Mutex
		enqueued = make(map[string]bool)
		rejected int
		// The Redis times of the first and last decisions that took a slot.
		first, last time.Time
	)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range sent / producers {
				id := fmt.Sprintf("p%d-%d", p, i)
				info, d, err := s.client.Enqueue(ctx, "flood", asynq.NewTask("work", nil), asynq.TaskID(id))
				var rej *enqueue.RejectedError
				mu.Lock()
				switch {
				case err == nil:
					enqueued[info.ID] = true
					if first.IsZero() || d.Now.Before(first) {
						first = d.Now
					}
					last = maxTime(last, d.Now)
					if d.Delay() > q.MaxDelay {
						t.Errorf("task %s: slot %v is %v after its decision (%v), more than MaxDelay", id, d.At, d.Delay(), d.Now)
					}
				case errors.As(err, &rej):
					rejected++
					if rej.RetryAfter() <= 0 {
						t.Errorf("task %s: RetryAfter() = %v, want > 0", id, rej.RetryAfter())
					}
				default:
					t.Errorf("task %s: %v", id, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	t.Logf("sent %d: %d enqueued, %d rejected", sent, len(enqueued), rejected)
	if got := len(enqueued) + rejected; got != sent {
		t.Errorf("enqueued %d + rejected %d = %d, want the %d sent", len(enqueued), rejected, got, sent)
	}
	// Slots lie between the first decision's now and the last one's now +
	// MaxDelay (the gate compares MaxDelay with the rounded slot), and each
	// window of that span holds at most limit of them.
	span := last.Add(q.MaxDelay).Sub(first)
	most := limit * (1 + int(span/q.Window))
	t.Logf("decisions from %v to %v (Redis time): slots may span %v, at most %d tasks", first, last, span, most)
	if len(enqueued) < limit || len(enqueued) > most {
		t.Errorf("%d enqueued, want %d to %d", len(enqueued), limit, most)
	}
	if rejected == 0 {
		t.Error("nothing was rejected; the test floods too little")
	}
	if diff := cmp.Diff(enqueued, s.queued(t, "default")); diff != "" {
		t.Errorf("queue mismatch (-want,+got):\n%s", diff)
	}
	if got := s.entries(t, "flood"); got != len(enqueued) {
		t.Errorf("the log holds %d entries, want one per enqueued task, %d", got, len(enqueued))
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
