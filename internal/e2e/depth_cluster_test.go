package e2e

import (
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestDepthOnCluster drains capped backlogs on a 3-master Redis Cluster:
// a tenant's permits, parked FIFO and due set share its hash tag, so the
// scripts run unchanged there, while asynq's queue and the set of capped
// tenants live on other masters. Tenants on masters 2, 1 and 0 (see
// handlerTenants), each with its own queue.
func TestDepthOnCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	q := admission.Quota{Limit: 100_000, Window: time.Hour, MaxInFlight: 3}
	for i, tenant := range []string{"acme", "globex corp", "ünïcødé 租户"} {
		t.Run(tenant, func(t *testing.T) {
			t.Parallel()
			s := buildStack(t, clusterBackend(cl), stackConfig{
				quotas: admission.StaticQuotas{Default: &q},
				gate:   slowBatch,
				queue:  "depth" + string(rune('a'+i)),
				prefix: "depth" + string(rune('a'+i)),
			})
			drainBacklog(t, s, tenant, 300, 3)
		})
	}
}
