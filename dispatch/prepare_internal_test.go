package dispatch

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
)

// While asynq marks a capped tenant's finished task done, the worker's
// loop admits the tenant's next task (prepare), and the turn that hands
// the finish in moves that task in at once when it grants it: the
// hand-off then waits for one call. An admission no grant used is given
// back, so the tenant's log keeps only what went in. asynq's dequeue and
// done are played by hand, as in TestDoneHandsTheFreedWorkerItsTenantsNextTask.
func TestAHandOffAdmitsTheNextTaskWhileAsynqMarksTheLastDone(t *testing.T) {
	ctx := context.Background()
	d, rdb, ac, s := handOffRig(t)
	const pending, active, log = "asynq:{default}:pending", "asynq:{default}:active", "admitq:{t}:log"
	ids := []string{"a", "b", "c", "d"}
	parkInLine(ctx, t, d, ac, ids)
	l := s.loops["default"]
	inLog := func(id string) bool { return rdb.ZScore(ctx, log, id).Err() != redis.Nil }
	// finish takes id as asynq's worker would, runs and finishes it, and
	// before asynq marks it done, waits for the admission made ahead of
	// task ahead.
	finish := func(id, ahead string) {
		t.Helper()
		if got := rdb.LMove(ctx, pending, active, "RIGHT", "LEFT").Val(); got != id {
			t.Fatalf("a worker took %q from the pending list, want %q", got, id)
		}
		rdb.HSet(ctx, "asynq:{default}:t:"+id, "state", "active")
		s.Finished("default", "t", id, time.Millisecond, true)
		v, ok := l.awaited.Load(id)
		if !ok {
			t.Fatalf("no hand-off awaits %s", id)
		}
		<-v.(*handOff).ready
		if !inLog(ahead) {
			t.Errorf("when asynq marks %s done, %s is not admitted yet", id, ahead)
		}
		rdb.LRem(ctx, active, 0, id)
		rdb.Del(ctx, "asynq:{default}:t:"+id)
		s.Done("default", id)
	}
	finish("a", "b")
	if got := rdb.LIndex(ctx, pending, -1).Val(); got != "b" {
		t.Fatalf("after a's hand-off the pending list's next is %q, want b", got)
	}
	// The turn that granted b named the entries next in t's line, for b's
	// hand-off to admit from without a read.
	l.claimMu.Lock()
	var next []string
	for _, e := range l.upNext["t"] {
		w, err := parseWaitingEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		next = append(next, w.id)
	}
	l.claimMu.Unlock()
	if !slices.Equal(next, []string{"c", "d"}) {
		t.Errorf("the turn that granted b named %q next in t's line, want c and d", next)
	}
	if n := l.readyIn.Load(); n != 1 {
		t.Errorf("turns moved in %d tasks as they granted them, want b", n)
	}
	if !inLog("b") || inLog("c") {
		t.Errorf("after a's hand-off the log has b %v and c %v, want b alone", inLog("b"), inLog("c"))
	}
	// b's hand-off admits d ahead, as if the entries named had skipped c;
	// the turn grants c, which goes through its own admission. d's slot
	// stays with d, whose own grant finds it: the log never runs short of
	// a task that went in.
	l.claimMu.Lock()
	l.upNext["t"] = l.upNext["t"][1:]
	l.claimMu.Unlock()
	finish("b", "d")
	if got := rdb.LIndex(ctx, pending, -1).Val(); got != "c" {
		t.Fatalf("after b's hand-off the pending list's next is %q, want c", got)
	}
	time.Sleep(50 * time.Millisecond)
	if !inLog("c") || !inLog("d") {
		t.Errorf("after b's hand-off the log has c %v and d %v, want both", inLog("c"), inLog("d"))
	}
	finish("c", "d")
	if got := rdb.LIndex(ctx, pending, -1).Val(); got != "d" {
		t.Fatalf("after c's hand-off the pending list's next is %q, want d", got)
	}
}

// A turn moves in at once the grants whose tasks the caller admitted
// before it (ready), and says so ("m"); a tenant's grant that follows one
// of its grants that is not ready waits to be moved with it, so that the
// tenant's tasks go into asynq's pending list in order.
func TestATurnMovesReadyGrantsInTheirTenantsOrder(t *testing.T) {
	for _, c := range []struct {
		ready, moved []string
		pending      []string // left to right; asynq takes from the right
	}{
		{ready: []string{"a", "b"}, moved: []string{"a", "b"}, pending: []string{"b", "a", "f3", "f2", "f1"}},
		{ready: []string{"b", "c"}, moved: nil, pending: []string{"f3", "f2", "f1"}},
		{ready: []string{"a", "c"}, moved: []string{"a"}, pending: []string{"a", "f3", "f2", "f1"}},
	} {
		ctx := context.Background()
		q := admission.Quota{Limit: 100_000, Window: time.Second}
		d, rdb, ac := rig(t, q)
		d.turnRaw(ctx, t, 0, 0, 0, 0) // a worker of concurrency 1: no room for more than 3
		for _, id := range []string{"f1", "f2", "f3"} {
			if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id)); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{"a", "b", "c"} {
			if tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: id}, q); err != nil || tk.Verdict != Wait {
				t.Fatalf("%s: %v %v", id, tk.Verdict, err)
			}
			if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id), asynq.ProcessAt(ParkedUntil)); err != nil {
				t.Fatal(err)
			}
		}
		args := []any{"big|16|1", 3_000_000, 3, 0, 0, 0, 0, len(c.ready)}
		for _, id := range c.ready {
			args = append(args, id)
		}
		res, err := d.run(ctx, d.scripts.dispatch, "default", args...)
		if err != nil {
			t.Fatal(err)
		}
		picks, _, err := readPicks(res)
		if err != nil {
			t.Fatal(err)
		}
		var moved []string
		for _, p := range picks {
			if p.moved {
				moved = append(moved, p.entry.id)
			}
		}
		if !slices.Equal(moved, c.moved) {
			t.Errorf("ready %v: the turn moved in %v, want %v", c.ready, moved, c.moved)
		}
		if got := rdb.LRange(ctx, d.keysFor("default").pending, 0, -1).Val(); !slices.Equal(got, c.pending) {
			t.Errorf("ready %v: pending %v, want %v", c.ready, got, c.pending)
		}
	}
}

// A task admitted ahead that a turn grants without moving it (it was not
// ready then) goes through the grant's own admission, which finds the slot
// made ahead: that slot is the task's, and stays when the loop forgets the
// claim.
func TestASlotAdmittedAheadStaysWithItsTask(t *testing.T) {
	ctx := context.Background()
	d, rdb, _, s := handOffRig(t)
	l := s.loops["default"]
	ds, err := d.gate.AdmitBatchAt(ctx, "t", []string{"x"}, time.Time{})
	if err != nil || len(ds) != 1 {
		t.Fatal(ds, err)
	}
	l.claimMu.Lock()
	l.claimed = map[string]*ahead{"x": {tenant: "t", dec: &ds[0]}}
	l.claimMu.Unlock()
	picks, moved := l.settleReady([]pick{{tenant: "t", entry: waitingEntry{id: "x"}}})
	if len(picks) != 1 || len(moved) != 0 {
		t.Fatalf("settleReady kept %v and moved %v, want the pick kept and none moved", picks, moved)
	}
	l.dropReady(true)
	time.Sleep(100 * time.Millisecond)
	if err := rdb.ZScore(ctx, "admitq:{t}:log", "x").Err(); err != nil {
		t.Errorf("x's slot admitted ahead: %v, want it kept for the grant", err)
	}
}
