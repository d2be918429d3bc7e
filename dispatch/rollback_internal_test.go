package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// A task that Redis rolls back to parked after its move (a snapshot taken
// between its grant and its move) waits again with its asynq.Deadline:
// the repair pass that puts it back at the head of its tenant's line
// keeps the deadline, so its turn archives it once the deadline passes,
// and asynq's retries of it never hold its tenant's place.
func TestARolledBackTaskKeepsItsDeadline(t *testing.T) {
	ctx := context.Background()
	d, rdb, ac := rig(t, q1)
	k := d.keysFor("default")
	d.turnRaw(ctx, t, 0, 0, 0, 0) // register a fair worker
	if tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: "a"}, q1); err != nil || tk.Verdict != Straight {
		t.Fatalf("a: %v %v", tk.Verdict, err)
	}
	if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID("a")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Hour)
	if tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: "b", Deadline: deadline}, q1); err != nil || tk.Verdict != Wait {
		t.Fatalf("b: %v %v", tk.Verdict, err)
	}
	if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID("b"), asynq.ProcessAt(ParkedUntil), asynq.Deadline(deadline)); err != nil {
		t.Fatal(err)
	}
	// a finishes: b is granted, admitted and moved in.
	rdb.Del(ctx, k.taskPrefix+"a")
	rdb.LRem(ctx, k.pending, 1, "a")
	picks := d.turnRaw(ctx, t, 1, 1, "a", 1000, 1, 1, 1000, 0, 0, "", 0, 0, 0)
	if len(picks) != 1 {
		t.Fatalf("picks %v", picks)
	}
	if err := d.move(ctx, "default", d.admit(ctx, "default", picks)); err != nil {
		t.Fatal(err)
	}
	if st := rdb.HGet(ctx, k.taskPrefix+"b", "state").Val(); st != "pending" {
		t.Fatalf("b is %q after its move, want pending", st)
	}
	// Redis comes back from a snapshot taken before the move.
	rdb.LRem(ctx, k.pending, 1, "b")
	rdb.HSet(ctx, k.taskPrefix+"b", "state", "scheduled")
	rdb.ZAdd(ctx, k.scheduled, redis.Z{Score: float64(ParkedUntil.Unix()), Member: "b"})
	if err := d.repairAll(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	if w := rdb.LRange(ctx, k.prefix+"w:t", 0, -1).Val(); len(w) != 1 {
		t.Fatalf("t's line after the repair: %q, want b back at its head", w)
	}
	if got, err := rdb.HGet(ctx, k.deadlines, "b").Int64(); err != nil || got != deadline.UnixMicro() {
		t.Errorf("b's deadline after the repair: %d, %v; want %d", got, err, deadline.UnixMicro())
	}
}
