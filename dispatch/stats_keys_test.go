package dispatch

import (
	"context"
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
	if _, err := d.run(ctx, d.scripts.dispatch, "default", "w|8|1", 600_000_000, 0, 0, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
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
