package dispatch

import (
	"context"
	"maps"
	"testing"

	"github.com/admitq/admitq/internal/freshid"
)

// A park given its task's message writes a task that waits as asynq's
// schedule script does, in the same call as its entry; a second park of
// the ID (a resend after a lost reply, whose ID is fresh) finds the task
// and stores nothing; a task that goes straight in is not written.
func TestAParkWithItsMessageWritesAWaitingTaskOnce(t *testing.T) {
	ctx := context.Background()
	d, rdb, _ := rig(t, q1)
	d.fairWorker(t, 1)
	msg := []byte("asynq's\x00message")
	park := func(id string) Ticket {
		t.Helper()
		tk, err := d.Park(freshid.Mark(ctx, id), Task{Queue: "default", Tenant: "t", ID: id, Message: msg}, q1)
		if err != nil {
			t.Fatalf("park %s: %v", id, err)
		}
		return tk
	}
	if tk := park("in"); tk.Verdict != Straight || tk.Written || tk.Exists {
		t.Fatalf("the first task: %+v, want Straight and nothing written", tk)
	}
	if n := rdb.Exists(ctx, "asynq:{default}:t:in").Val(); n != 0 {
		t.Fatalf("a task that goes straight in was written by its park")
	}
	first := park("a")
	if first.Verdict != Wait || !first.Written || first.Waiting != 1 {
		t.Fatalf("the second task: %+v, want Wait, Written, 1 waiting", first)
	}
	want := map[string]string{"msg": string(msg), "state": "scheduled"}
	if got := rdb.HGetAll(ctx, "asynq:{default}:t:a").Val(); !maps.Equal(got, want) {
		t.Errorf("the task's hash %q, want asynq's %q", got, want)
	}
	if s, err := rdb.ZScore(ctx, "asynq:{default}:scheduled", "a").Result(); err != nil || int64(s) != ParkedUntil.Unix() {
		t.Errorf("the task's score %v (%v), want ParkedUntil", int64(s), err)
	}
	for i := range 2 {
		again := park("a")
		if again.Verdict != Wait || again.Written || !again.Exists {
			t.Fatalf("park %d of the ID again: %+v, want Exists", i+2, again)
		}
		if err := d.Abandon(ctx, again); err != nil {
			t.Fatal(err)
		}
	}
	// The one entry, still there after the abandons of the repeats.
	if n := rdb.LLen(ctx, d.keysFor("default").waitingKey("t")).Val(); n != 1 {
		t.Errorf("%d entries wait, want 1", n)
	}
	// A resend after the queue went direct (the last worker's record
	// lapsed in between) still finds the task it wrote.
	k := d.keysFor("default")
	if err := rdb.Del(ctx, k.workers, k.meta).Err(); err != nil {
		t.Fatal(err)
	}
	if again := park("a"); !again.Exists || again.Verdict != Wait {
		t.Errorf("a park of the ID once the queue is direct: %+v, want Exists", again)
	}
	d.fairWorker(t, 1)
	// Another task's written by asynq, not parked: found, nothing stored.
	if err := rdb.HSet(ctx, "asynq:{default}:t:other", "msg", "x", "state", "pending").Err(); err != nil {
		t.Fatal(err)
	}
	if tk := park("other"); !tk.Exists {
		t.Errorf("a park of another task's ID: %+v, want Exists", tk)
	}
	if got := rdb.HGetAll(ctx, "asynq:{default}:t:other").Val(); got["state"] != "pending" || got["msg"] != "x" {
		t.Errorf("the other task's hash became %q", got)
	}
	if tk := park("b"); tk.Waiting != 2 {
		t.Errorf("the next task: %d waiting, want 2", tk.Waiting)
	}
	if _, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: "u", Message: msg, UniqueTTL: 1e9}, q1); err == nil {
		t.Errorf("a park wrote a task with a unique lock")
	}
}
