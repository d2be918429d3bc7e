package metrics

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/worker"
)

// A task throttled downstream runs again without raising its retry count;
// its queueing delay is still observed once, at its first start.
func TestQueueDelayIsObservedOnlyAtTheFirstStart(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	q := admission.Quota{Limit: 100, Window: time.Second}
	gate := admission.New(rdb, admission.StaticQuotas{Default: &q})
	defer gate.Close()
	client := enqueue.NewFromRedis(rdb, gate)

	m := New()
	var runs atomic.Int32
	w := worker.New(asynq.RedisClientOpt{Addr: srv.Addr()}, worker.Config{
		Concurrency:              1,
		TaskCheckInterval:        20 * time.Millisecond,
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		Middleware:               []asynq.MiddlewareFunc{m.Middleware()},
		Logger:                   slog.New(slog.DiscardHandler),
	})
	err := w.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if runs.Add(1) < 3 {
			return worker.Throttled(0)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown()
	if _, _, err := client.Enqueue(context.Background(), "acme", asynq.NewTask("t", nil)); err != nil {
		t.Fatal(err)
	}
	processed := `admitq_tasks_processed_total{tenant="acme"}`
	var got map[string]float64
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got = gather(t, m, "admitq_queue_delay_seconds", "admitq_tasks_processed_total")
		if got[processed] >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s, %s = %v, want 3 (two throttled runs and a success)", processed, got[processed])
		}
	}
	if n := got[`admitq_queue_delay_seconds_count{tenant="acme"}`]; n != 1 {
		t.Errorf("queue delay observed %v times for one task run three times, want once", n)
	}
}
