package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
)

// TestTenantReachesTheHandler enqueues tasks for several tenants, admitted
// and deferred, one by one and in a batch, and checks that worker.Tenant
// gives each handler its task's tenant, with the caller's headers intact.
func TestTenantReachesTheHandler(t *testing.T) {
	t.Parallel()
	tenants := []string{"acme", "globex corp", "ünïcødé 租户", "a:{b}:c"}
	// Limit 1: each tenant's second task is deferred to the next whole
	// second or the one after, so the tenant also survives the scheduled set.
	q := admission.Quota{Limit: 1, Window: time.Second, MaxDelay: 10 * time.Second}
	s := newStack(t, admission.StaticQuotas{Default: &q})
	rec := newRecorder(3 * len(tenants))
	s.startWorker(t, testWorkerConfig(t, 4), rec)
	ctx := context.Background()

	want := make(map[string]string) // task ID -> tenant
	traced := make(map[string]bool) // tasks with the caller's own header
	for _, tenant := range tenants {
		task := asynq.NewTaskWithHeaders("work", nil, map[string]string{"trace-id": "t1"})
		info, _, err := s.client.Enqueue(ctx, tenant, task)
		if err != nil {
			t.Fatalf("Enqueue(%q): %v", tenant, err)
		}
		want[info.ID] = tenant
		traced[info.ID] = true
		rs, err := s.client.EnqueueBatch(ctx, tenant, []*asynq.Task{
			asynq.NewTask("work", []byte("1")),
			asynq.NewTask("work", []byte("2")),
		})
		if err != nil {
			t.Fatalf("EnqueueBatch(%q): %v", tenant, err)
		}
		for i, r := range rs {
			if r.Err != nil {
				t.Fatalf("EnqueueBatch(%q) task %d: %v", tenant, i, r.Err)
			}
			if r.Decision.Outcome != admission.Deferred {
				t.Errorf("EnqueueBatch(%q) task %d was %v, want deferred", tenant, i, r.Decision.Outcome)
			}
			want[r.Info.ID] = tenant
		}
	}

	got := make(map[string]string)
	for _, st := range rec.wait(t) {
		got[st.ID] = st.Tenant
		if traced[st.ID] && st.Headers["trace-id"] != "t1" {
			t.Errorf("task %s lost the caller's header: %v", st.ID, st.Headers)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tenant per task mismatch (-want,+got):\n%s", diff)
	}
}
