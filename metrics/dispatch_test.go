package metrics

import (
	"fmt"
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

// Tenants that share a label add up in its series, rather than the last
// one observed standing for them all.
func TestObserveDispatchAddsUpTenantsOfOneLabel(t *testing.T) {
	m := New(WithTenantLabel(func(string) string { return "free" }))
	now := time.Unix(1_800_000_000, 0)
	m.ObserveDispatch(dispatch.QueueStats{Queue: "default", Now: now, Tenants: []dispatch.TenantStats{
		{Tenant: "a", InFlight: 3, Waiting: 10, OldestWaiting: now.Add(-time.Minute), Weight: 2, Paused: true, Share: 0.25},
		{Tenant: "b", InFlight: 4, Weight: 1, Held: true, Share: 0.5},
	}})
	want := map[string]float64{
		`admitq_tenant_in_flight{queue="default",tenant="free"}`:                 7,
		`admitq_tenant_parked{queue="default",tenant="free"}`:                    10,
		`admitq_tenant_oldest_parked_age_seconds{queue="default",tenant="free"}`: 60,
		`admitq_tenant_worker_share{queue="default",tenant="free"}`:              0.75,
		`admitq_tenant_weight{queue="default",tenant="free"}`:                    2,
		`admitq_tenant_paused{queue="default",tenant="free"}`:                    1,
		`admitq_tenant_held{queue="default",tenant="free"}`:                      1,
	}
	got := gather(t, m, "admitq_tenant_in_flight", "admitq_tenant_parked", "admitq_tenant_oldest_parked_age_seconds", "admitq_tenant_worker_share", "admitq_tenant_weight",
		"admitq_tenant_paused", "admitq_tenant_held")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("one label's gauges (-want,+got):\n%s", diff)
	}
}

func TestObserveDispatchSetsKeyGauges(t *testing.T) {
	// Keys are not tenants: they take none of the tenants' label values.
	m := New(WithMaxTenants(1))
	now := time.Unix(1_800_000_000, 0)
	m.ObserveDispatch(dispatch.QueueStats{Queue: "other", Now: now, Keys: []dispatch.KeyStats{{Key: "api:stripe", InFlight: 2, Cap: 20}}})
	m.ObserveDispatch(dispatch.QueueStats{Queue: "default", Now: now, Keys: []dispatch.KeyStats{
		{Key: "api:stripe", InFlight: 20, Cap: 20, AtCap: true, Waiting: 315},
		{Key: "api:github", Waiting: 7, Paused: true},
		{Key: "smtp", InFlight: 1, Waiting: 3, Held: true, HeldUntil: now.Add(30 * time.Second)},
	}})
	want := map[string]float64{
		`admitq_key_in_flight{key="api:github",queue="default"}`: 0,
		`admitq_key_in_flight{key="api:stripe",queue="default"}`: 20,
		`admitq_key_in_flight{key="smtp",queue="default"}`:       1,
		`admitq_key_in_flight{key="api:stripe",queue="other"}`:   2,
		`admitq_key_waiting{key="api:github",queue="default"}`:   7,
		`admitq_key_waiting{key="api:stripe",queue="default"}`:   315,
		`admitq_key_waiting{key="smtp",queue="default"}`:         3,
		`admitq_key_waiting{key="api:stripe",queue="other"}`:     0,
		`admitq_key_paused{key="api:github",queue="default"}`:    1,
		`admitq_key_paused{key="api:stripe",queue="default"}`:    0,
		`admitq_key_paused{key="smtp",queue="default"}`:          0,
		`admitq_key_paused{key="api:stripe",queue="other"}`:      0,
		`admitq_key_held{key="api:github",queue="default"}`:      0,
		`admitq_key_held{key="api:stripe",queue="default"}`:      0,
		`admitq_key_held{key="smtp",queue="default"}`:            1,
		`admitq_key_held{key="api:stripe",queue="other"}`:        0,
	}
	keyGauges := []string{"admitq_key_in_flight", "admitq_key_waiting", "admitq_key_paused", "admitq_key_held"}
	if diff := cmp.Diff(want, gather(t, m, keyGauges...)); diff != "" {
		t.Errorf("key gauges (-want,+got):\n%s", diff)
	}

	// The next reading of default without smtp and api:github drops their
	// series there; the other queue's stay.
	m.ObserveDispatch(dispatch.QueueStats{Queue: "default", Now: now, Keys: []dispatch.KeyStats{{Key: "api:stripe", InFlight: 19, Cap: 20}}})
	want = map[string]float64{
		`admitq_key_in_flight{key="api:stripe",queue="default"}`: 19,
		`admitq_key_in_flight{key="api:stripe",queue="other"}`:   2,
	}
	if diff := cmp.Diff(want, gather(t, m, "admitq_key_in_flight")); diff != "" {
		t.Errorf("in flight after smtp and api:github left (-want,+got):\n%s", diff)
	}
	if got := gather(t, m, "admitq_key_waiting", "admitq_key_paused", "admitq_key_held"); len(got) != 6 {
		t.Errorf("after two keys left default: %d waiting, paused and held series, want 6 (api:stripe's in two queues): %v", len(got), got)
	}
}

func TestKeySeriesAreBoundedPerQueue(t *testing.T) {
	m := New()
	var keys []dispatch.KeyStats
	for i := range 3 * dispatch.StatsKeys {
		keys = append(keys, dispatch.KeyStats{Key: fmt.Sprintf("k%04d", i), Waiting: 1})
	}
	for _, q := range []string{"a", "b"} {
		m.ObserveDispatch(dispatch.QueueStats{Queue: q, Keys: keys})
	}
	if got := len(gather(t, m, "admitq_key_waiting")); got != 2*dispatch.StatsKeys {
		t.Errorf("%d keys observed in each of 2 queues: %d series, want %d (dispatch.StatsKeys a queue)", len(keys), got, 2*dispatch.StatsKeys)
	}
}
