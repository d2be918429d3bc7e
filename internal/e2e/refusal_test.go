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
	)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range sent / producers {
				id := fmt.Sprintf("p%d-%d", p, i)
				info, _, err := s.client.Enqueue(ctx, "flood", asynq.NewTask("work", nil), asynq.TaskID(id))
				var rej *enqueue.RejectedError
				mu.Lock()
				switch {
				case err == nil:
					enqueued[info.ID] = true
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
	// At most limit now and limit in each window of MaxDelay ahead; the slots
	// are whole seconds, so one window may be cut short by rounding.
	if most := limit * (1 + int(q.MaxDelay/q.Window)); len(enqueued) < limit || len(enqueued) > most {
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
