package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
)

// TestTenantReachesTheHandler runs the tenant scenario (see reachHandler)
// on a single redis-server; TestCluster/tenant runs it on a cluster.
func TestTenantReachesTheHandler(t *testing.T) {
	t.Parallel()
	reachHandler(t, buildStack(t, serverBackend(t), tenantConfig()))
}

// handlerTenants are the tenants of the tenant scenario: plain, with a
// space, non-ASCII, and with braces, which on a cluster make the hash tag of
// the log key {a:{b} rather than the whole tenant. On a redistest cluster
// their logs fall on all three masters.
var handlerTenants = []string{"acme", "globex corp", "ünïcødé 租户", "a:{b}:c"}

func tenantConfig() stackConfig {
	// Limit 1: each tenant's second task is deferred to the next whole
	// second or the one after, so the tenant also survives the scheduled set.
	q := admission.Quota{Limit: 1, Window: time.Second, MaxDelay: 10 * time.Second}
	return stackConfig{quotas: admission.StaticQuotas{Default: &q}, queue: "tenant", prefix: "tenant"}
}

// reachHandler enqueues tasks for several tenants on s, admitted and
// deferred, one by one and in a batch, and checks that worker.Tenant gives
// each handler its task's tenant, with the caller's headers intact. On a
// cluster it also checks that the tenants' logs are on all three masters.
func reachHandler(t *testing.T, s *stack) {
	rec := newRecorder(3 * len(handlerTenants))
	s.startWorker(t, testWorkerConfig(t, 4), rec)
	ctx := context.Background()

	want := make(map[string]string) // task ID -> tenant
	traced := make(map[string]bool) // tasks with the caller's own header
	for _, tenant := range handlerTenants {
		task := asynq.NewTaskWithHeaders("work", nil, map[string]string{"trace-id": "t1"})
		info, _, err := s.enqueue(ctx, tenant, task)
		if err != nil {
			t.Fatalf("Enqueue(%q): %v", tenant, err)
		}
		want[info.ID] = tenant
		traced[info.ID] = true
		rs, err := s.enqueueBatch(ctx, tenant, []*asynq.Task{
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

	if s.backend.cluster != nil {
		checkSpread(t, s, handlerTenants, nil) // each log holds a slot ahead
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
