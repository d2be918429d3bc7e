package metrics

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/admitq/admitq/admission"
)

func TestObserveDepthSetsGauges(t *testing.T) {
	m := New()
	now := time.Unix(1_800_000_000, 0)
	m.ObserveDepth(admission.Depth{Tenant: "noisy", Now: now, InFlight: 4, Parked: 120, OldestParked: now.Add(-1500 * time.Millisecond)})
	m.ObserveDepth(admission.Depth{Tenant: "calm", Now: now, InFlight: 1})
	want := map[string]float64{
		`admitq_tenant_in_flight{tenant="calm"}`:                  1,
		`admitq_tenant_in_flight{tenant="noisy"}`:                 4,
		`admitq_tenant_parked{tenant="calm"}`:                     0,
		`admitq_tenant_parked{tenant="noisy"}`:                    120,
		`admitq_tenant_oldest_parked_age_seconds{tenant="calm"}`:  0,
		`admitq_tenant_oldest_parked_age_seconds{tenant="noisy"}`: 1.5,
	}
	got := gather(t, m, "admitq_tenant_in_flight", "admitq_tenant_parked", "admitq_tenant_oldest_parked_age_seconds")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("depth gauges (-want,+got):\n%s", diff)
	}
}
