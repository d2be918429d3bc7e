package metrics

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/admitq/admitq/dispatch"
)

func TestObserveDispatchSetsGauges(t *testing.T) {
	m := New()
	now := time.Unix(1_800_000_000, 0)
	m.ObserveDispatch(dispatch.QueueStats{Queue: "default", Now: now, Tenants: []dispatch.TenantStats{
		{Tenant: "noisy", InFlight: 4, Waiting: 120, OldestWaiting: now.Add(-1500 * time.Millisecond), Weight: 1, WorkerTime: 3 * time.Second, Share: 0.75},
		{Tenant: "calm", InFlight: 1, Weight: 3, WorkerTime: time.Second, Share: 0.25, Paused: true, Held: true},
	}})
	want := map[string]float64{
		`admitq_tenant_in_flight{queue="default",tenant="calm"}`:                  1,
		`admitq_tenant_in_flight{queue="default",tenant="noisy"}`:                 4,
		`admitq_tenant_parked{queue="default",tenant="calm"}`:                     0,
		`admitq_tenant_parked{queue="default",tenant="noisy"}`:                    120,
		`admitq_tenant_oldest_parked_age_seconds{queue="default",tenant="calm"}`:  0,
		`admitq_tenant_oldest_parked_age_seconds{queue="default",tenant="noisy"}`: 1.5,
		`admitq_tenant_worker_share{queue="default",tenant="calm"}`:               0.25,
		`admitq_tenant_worker_share{queue="default",tenant="noisy"}`:              0.75,
		`admitq_tenant_weight{queue="default",tenant="calm"}`:                     3,
		`admitq_tenant_weight{queue="default",tenant="noisy"}`:                    1,
		`admitq_tenant_paused{queue="default",tenant="calm"}`:                     1,
		`admitq_tenant_paused{queue="default",tenant="noisy"}`:                    0,
		`admitq_tenant_held{queue="default",tenant="calm"}`:                       1,
		`admitq_tenant_held{queue="default",tenant="noisy"}`:                      0,
	}
	got := gather(t, m, "admitq_tenant_in_flight", "admitq_tenant_parked", "admitq_tenant_oldest_parked_age_seconds", "admitq_tenant_worker_share", "admitq_tenant_weight",
		"admitq_tenant_paused", "admitq_tenant_held")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dispatch gauges (-want,+got):\n%s", diff)
	}
	// The next reading without noisy drops its series.
	m.ObserveDispatch(dispatch.QueueStats{Queue: "default", Now: now, Tenants: []dispatch.TenantStats{{Tenant: "calm", InFlight: 1, Weight: 3}}})
	if got := gather(t, m, "admitq_tenant_parked"); len(got) != 1 {
		t.Errorf("after noisy went idle, parked series = %v, want calm's only", got)
	}
}
