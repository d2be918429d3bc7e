package dispatch

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
)

// Stats reads a tenant's oldest waiting task in any of its flows, and the
// keys its tasks wait on.
func TestStatsSeesTasksWaitingOnKeys(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	d, _, _ := rig(t, q)
	d.fairWorker(t, 8)
	tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "a", ID: "x", Priority: 3,
		Keys: []Key{{Name: "api:b", MaxInFlight: 5}, {Name: "api:a", Paused: true}}}, q)
	if err != nil || tk.Verdict != Wait {
		t.Fatalf("park: %v, %v; want it to wait on its paused key", tk.Verdict, err)
	}
	qs, err := d.Stats(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if len(qs.Tenants) != 1 || qs.Tenants[0].Waiting != 1 || !qs.Tenants[0].OldestWaiting.Equal(tk.Now) {
		t.Fatalf("tenants %+v, want a with 1 waiting since %v", qs.Tenants, tk.Now)
	}
	want := []KeyStats{{Key: "api:a", Paused: true, Waiting: 1}, {Key: "api:b", Cap: 5, Waiting: 1}}
	if len(qs.Keys) != len(want) {
		t.Fatalf("keys %+v, want %+v", qs.Keys, want)
	}
	for i := range want {
		if qs.Keys[i] != want[i] {
			t.Errorf("key %d: %+v, want %+v", i, qs.Keys[i], want[i])
		}
	}
}

// A tenant whose every waiting task is on a closed key, and that has
// nothing in flight, leaves the runnable tenants at a turn; Stats still
// lists it and counts it as waiting.
func TestStatsListsTenantsWaitingOnKeys(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	d, _, _ := rig(t, q)
	d.fairWorker(t, 8)
	key := []Key{{Name: "api:x", MaxInFlight: 1}}
	if tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "a", ID: "a1", Keys: key}, q); err != nil || tk.Verdict != Straight {
		t.Fatalf("a1: %v, %v", tk.Verdict, err)
	}
	for _, id := range []string{"g1", "g2"} {
		if tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "globex", ID: id, Keys: key}, q); err != nil || tk.Verdict != Wait {
			t.Fatalf("%s: %v, %v", id, tk.Verdict, err)
		}
	}
	turnPicks(t, d) // finds globex waiting on the full key: it registers with it
	if n := d.rdb.ZCard(ctx, d.keysFor("default").vt).Val(); n != 0 {
		t.Fatalf("%d tenants runnable, want none", n)
	}
	qs, err := d.Stats(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(qs.Tenants, func(ts TenantStats) bool { return ts.Tenant == "globex" })
	if i < 0 || qs.Tenants[i].Waiting != 2 || qs.TenantsWaiting != 1 {
		t.Fatalf("tenants %+v, %d waiting; want globex with 2 tasks waiting, counted", qs.Tenants, qs.TenantsWaiting)
	}
}
