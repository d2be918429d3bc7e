package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestFairOnCluster runs a fair queue on a 3-master Redis Cluster: the
// dispatcher's keys share the queue's hash tag with asynq's, the tenants'
// logs live on other masters. Two tenants at weights 3:1 keep a backlog;
// every task runs exactly once, and the heavier tenant gets the larger
// share of worker time while both wait.
func TestFairOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	def := admission.Quota{Limit: 100_000, Window: time.Second}
	gold := def
	gold.Weight = 3
	s := buildStack(t, clusterBackend(cl), stackConfig{
		quotas: admission.StaticQuotas{Default: &def, Tenants: map[string]admission.Quota{"gold": gold}},
		gate:   slowBatch,
		queue:  "fairq",
		prefix: "fairc",
	})
	var mu sync.Mutex
	worked := map[string]time.Duration{}
	ran := map[string]int{}
	cfg := testWorkerConfig(t, 4)
	cfg.Gate, cfg.Fair, cfg.TaskCheckInterval = s.gate, true, 5*time.Millisecond
	s.startWorker(t, cfg, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		start := time.Now()
		time.Sleep(5 * time.Millisecond)
		id, _ := asynq.GetTaskID(ctx)
		mu.Lock()
		ran[id]++
		if len(ran) <= 240 { // both still backlogged
			worked[string(task.Payload())] += time.Since(start)
		}
		mu.Unlock()
		return nil
	}))
	time.Sleep(1100 * time.Millisecond) // producers see the fair worker
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, tenant := range []string{"gold", "basic"} {
		wg.Go(func() {
			for i := range 200 {
				id := fmt.Sprintf("%s-%d", tenant, i)
				if _, _, err := s.enqueue(ctx, tenant, asynq.NewTask("work", []byte(tenant)), asynq.TaskID(id)); err != nil {
					t.Errorf("enqueue %s: %v", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	poll(t, "every task ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == 400
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range ran {
		if n != 1 {
			t.Errorf("task %s ran %d times", id, n)
		}
	}
	ratio := float64(worked["gold"]) / float64(worked["basic"])
	t.Logf("on a cluster, gold (weight 3) got %.2f× basic's worker time while both waited", ratio)
	if ratio < 1.5 {
		t.Errorf("gold got %.2f× basic's worker time at weights 3:1; want clearly more", ratio)
	}
}
