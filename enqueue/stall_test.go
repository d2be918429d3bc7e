package enqueue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// TestAStalledWriteEndsWithTheCallersContext: with FailOpen, a Redis that
// stops answering (SIGSTOP) after the gate decided locally holds asynq's
// write. Enqueue returns soon after its ctx ends, with an error that leaves
// the task's fate open (the write was sent), not after the client's own
// timeouts and retries (5 s and more).
func TestAStalledWriteEndsWithTheCallersContext(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			q := admission.Quota{Limit: 5, Window: time.Second}
			g := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithFailurePolicy(admission.FailOpen))
			t.Cleanup(func() { _ = g.Close() })
			c := enqueue.NewFromRedis(rdb, g, enqueue.WithBatching(batching))
			if _, _, err := c.Enqueue(context.Background(), "warm", asynq.NewTask("x", nil)); err != nil {
				t.Fatal(err)
			}
			srv.Pause()
			t.Cleanup(srv.Resume)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, d, err := c.Enqueue(ctx, "acme", asynq.NewTask("x", nil))
			took := time.Since(start)
			if err == nil || !enqueue.IsAmbiguous(err) {
				t.Errorf("Enqueue = %v (decision %v, local %v), want an error that leaves the task's fate open", err, d.Outcome, d.Local)
			}
			if took > 2*time.Second {
				t.Errorf("Enqueue with a 500 ms context returned after %v, want soon after its context ended", took)
			}
		})
	}
}
