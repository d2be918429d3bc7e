package metrics

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/worker"
)

// TestAFairWorkerReportsItsKeys: a fair worker with a gate reports its
// queue's keys through Config.OnDispatch, and the key gauges follow: a
// key at its cap (in flight, the rest waiting), a paused key, and a key a
// downstream throttle holds (worker.ThrottledKey).
func TestAFairWorkerReportsItsKeys(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	quotas := admission.NewRedisQuotas(rdb)
	ctx := t.Context()
	if err := quotas.SetDefault(ctx, admission.Quota{Limit: admission.NoLimit}); err != nil {
		t.Fatal(err)
	}
	for key, q := range map[string]admission.Quota{
		"api:stripe": {Limit: admission.NoLimit, MaxInFlight: 2},
		"smtp":       {Limit: admission.NoLimit, Paused: true},
	} {
		if err := quotas.SetKey(ctx, key, q); err != nil {
			t.Fatal(err)
		}
	}
	gate := admission.New(rdb, quotas)
	defer gate.Close()
	client := enqueue.NewFromRedis(rdb, gate)

	m := New()
	release := make(chan struct{})
	const queue = "keyed"
	w := worker.NewFromRedis(rdb, worker.Config{
		Gate:              gate,
		Fair:              true,
		Concurrency:       8,
		Queues:            map[string]int{queue: 1},
		TaskCheckInterval: 20 * time.Millisecond,
		ShutdownTimeout:   time.Second,
		OnDispatch:        m.ObserveDispatch,
		Logger:            slog.New(slog.DiscardHandler),
	})
	err := w.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		if task.Type() == "throttled" {
			return worker.ThrottledKey("db", time.Minute)
		}
		select { // hold the key's places until the test ends
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Shutdown()
	defer close(release)

	send := func(typ string, n int, key string) {
		t.Helper()
		for range n {
			if _, _, err := client.Enqueue(ctx, "acme", asynq.NewTask(typ, nil), asynq.Queue(queue), enqueue.Keys(key)); err != nil {
				t.Fatalf("enqueue %s with key %s: %v", typ, key, err)
			}
		}
	}
	send("block", 5, "api:stripe")
	send("block", 2, "smtp")
	send("throttled", 1, "db")
	// wait waits until the gauges named in want hold its values.
	wait := func(what string, want map[string]float64) {
		t.Helper()
		var got map[string]float64
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			got = gather(t, m, "admitq_key_in_flight", "admitq_key_waiting", "admitq_key_paused", "admitq_key_held")
			for k := range got {
				if _, ok := want[k]; !ok {
					delete(got, k)
				}
			}
			if cmp.Equal(want, got) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after 15s (-want,+got):\n%s", what, cmp.Diff(want, got))
			}
		}
	}
	wait("the capped and the paused key", map[string]float64{
		`admitq_key_in_flight{key="api:stripe",queue="keyed"}`: 2,
		`admitq_key_waiting{key="api:stripe",queue="keyed"}`:   3,
		`admitq_key_paused{key="api:stripe",queue="keyed"}`:    0,
		`admitq_key_in_flight{key="smtp",queue="keyed"}`:       0,
		`admitq_key_waiting{key="smtp",queue="keyed"}`:         2,
		`admitq_key_paused{key="smtp",queue="keyed"}`:          1,
	})
	// The db task, throttled, keeps its place (asynq retries it in a
	// minute) and its key is held.
	wait("the throttled key", map[string]float64{
		`admitq_key_held{key="db",queue="keyed"}`:      1,
		`admitq_key_in_flight{key="db",queue="keyed"}`: 1,
	})
}
