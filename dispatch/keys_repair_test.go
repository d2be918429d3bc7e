package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
)

// A key's places follow asynq's view of its tasks, as a tenant's do: tasks
// of a key at its cap deleted from outside (asynqmon's "delete") give their
// places back at the next repair pass, and the task waiting on the key goes
// in; the key's record goes once nothing of it waits or runs. A snapshot
// restore that parks a keyed task again puts it back in its flow.
func TestKeyPlacesFollowAsynq(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	d, rdb, ac := rig(t, q)
	k := d.keysFor("default")
	d.fairWorker(t, 8)
	key := []Key{{Name: "api:x", MaxInFlight: 2}}
	for i, id := range []string{"a1", "b1"} {
		tk, err := d.Park(ctx, Task{Queue: "default", Tenant: []string{"a", "b"}[i], ID: id, Keys: key}, q)
		if err != nil || tk.Verdict != Straight {
			t.Fatalf("%s: %v, %v; want it straight in", id, tk.Verdict, err)
		}
		if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id)); err != nil {
			t.Fatal(err)
		}
	}
	tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "c", ID: "c1", Keys: key}, q)
	if err != nil || tk.Verdict != Wait {
		t.Fatalf("c1: %v, %v; want it to wait on the full key", tk.Verdict, err)
	}
	if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID("c1"), asynq.ProcessAt(ParkedUntil)); err != nil {
		t.Fatal(err)
	}
	if picks := turnPicks(t, d); len(picks) != 0 {
		t.Fatalf("a turn granted %v while the key is full", picks)
	}
	ins := asynq.NewInspectorFromRedisClient(rdb)
	for _, id := range []string{"a1", "b1"} {
		if err := ins.DeleteTask("default", id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.run(ctx, d.scripts.repair, "default", "0", 0); err != nil {
		t.Fatal(err)
	}
	picks := turnPicks(t, d)
	if len(picks) != 1 || picks[0].entry.id != "c1" {
		t.Fatalf("after the repair pass a turn granted %v, want c1", picks)
	}
	if n := rdb.HGet(ctx, k.keyKey("api:x"), "n").Val(); n != "1" {
		t.Errorf("the key counts %s in flight, want 1 (c1)", n)
	}

	// Redis comes back from a snapshot taken before c1's move: asynq keeps
	// it parked again, and the dispatcher puts it back in its flow.
	if err := d.move(ctx, "default", []moveOp{{op: opGo, id: "c1"}}); err != nil {
		t.Fatal(err)
	}
	rdb.LRem(ctx, k.pending, 0, "c1")
	rdb.HSet(ctx, k.taskPrefix+"c1", "state", "scheduled")
	rdb.ZAdd(ctx, k.scheduled, redis.Z{Score: float64(ParkedUntil.Unix()), Member: "c1"})
	if _, err := d.run(ctx, d.scripts.repair, "default", "0", 0); err != nil {
		t.Fatal(err)
	}
	if got := rdb.LRange(ctx, k.flowKey("c", "0\tapi:x"), 0, -1).Val(); len(got) != 1 {
		t.Fatalf("c's flow on api:x holds %q after the rollback, want c1", got)
	}
	if h := rdb.HGetAll(ctx, k.keyKey("api:x")).Val(); h["n"] != "0" || h["w"] != "1" {
		t.Errorf("the key's record %v after the rollback, want nothing in flight and 1 waiting", h)
	}
	picks = turnPicks(t, d)
	if len(picks) != 1 || picks[0].entry.id != "c1" {
		t.Fatalf("after the rollback a turn granted %v, want c1 again", picks)
	}
	if err := d.move(ctx, "default", []moveOp{{op: opGo, id: "c1"}}); err != nil {
		t.Fatal(err)
	}
	if err := ins.DeleteTask("default", "c1"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.run(ctx, d.scripts.repair, "default", "0", 0); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, k.keyKey("api:x"), k.blockedKey("api:x")).Val(); n != 0 || rdb.SCard(ctx, k.keys).Val() != 0 {
		t.Errorf("the key's records outlive its last task (%d keys left)", n)
	}
}

// turnPicks runs a dispatch turn of the test's worker that may grant up
// to 8 tasks, and returns its grants.
func turnPicks(t *testing.T, d *Dispatcher) []pick {
	t.Helper()
	res, err := d.run(context.Background(), d.scripts.dispatch, "default", "w|8|1", 600_000_000, 8, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	picks, _, err := readPicks(res)
	if err != nil {
		t.Fatal(err)
	}
	return picks
}

// Abandon of a task waiting in a keyed flow (its producer's write failed)
// takes its entry out of the flow and the key's count: nothing of it is
// left.
func TestAbandonEmptiesAKeyedFlow(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	d, rdb, _ := rig(t, q)
	k := d.keysFor("default")
	d.fairWorker(t, 8)
	tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "a", ID: "a1", Priority: 1, Keys: []Key{{Name: "api:x", Paused: true}}}, q)
	if err != nil || tk.Verdict != Wait {
		t.Fatalf("a1: %v, %v; want it to wait on the paused key", tk.Verdict, err)
	}
	if n := rdb.ZCard(ctx, k.flowsKey("a")).Val(); n != 1 {
		t.Fatalf("a has %d flows listed, want 1", n)
	}
	if err := d.Abandon(ctx, tk); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, k.flowKey("a", "1\tapi:x"), k.flowsKey("a"), k.tenantKey("a"), k.keyKey("api:x")).Val(); n != 0 {
		t.Errorf("%d of a's flow, flows, record and the key's record are left after Abandon, want none", n)
	}
}
