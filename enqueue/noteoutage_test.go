package enqueue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// TestWhatIsNoOutageIsNotUnavailable: a caller's context that ended and a
// gate prefix the dispatcher refuses fail Enqueue without matching
// admission.ErrUnavailable, which callers map to an outage of Redis (they
// did, both of them), and write nothing.
func TestWhatIsNoOutageIsNotUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	q := admission.Quota{Limit: 5, Window: time.Minute}
	for _, policy := range []admission.FailurePolicy{admission.FailClosed, admission.FailOpen} {
		g := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithFailurePolicy(policy))
		c := enqueue.NewFromRedis(rdb, g)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, _, err := c.Enqueue(ctx, "acme", asynq.NewTask("x", nil))
		if !errors.Is(err, context.Canceled) || errors.Is(err, admission.ErrUnavailable) {
			t.Errorf("%v, a context cancelled: %v; want context.Canceled, not ErrUnavailable", policy, err)
		}
		g.Close()

		braced := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithFailurePolicy(policy), admission.WithPrefix("app{1}"))
		_, _, err = enqueue.NewFromRedis(rdb, braced).Enqueue(t.Context(), "acme", asynq.NewTask("x", nil))
		if !errors.Is(err, dispatch.ErrInvalidPrefix) || errors.Is(err, admission.ErrUnavailable) {
			t.Errorf("%v, a prefix with braces: %v; want dispatch.ErrInvalidPrefix, not ErrUnavailable", policy, err)
		}
		braced.Close()
	}
	if n := rdb.DBSize(t.Context()).Val(); n != 0 {
		keys, _ := rdb.Keys(t.Context(), "*").Result()
		t.Errorf("written: %v", keys)
	}
}
