package dispatch

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
)

// Two grants of one tenant that both go back (the rate deferred them)
// return to the head of its line in their order, ahead of the task that
// waited behind them: a, b, c, not b, a, c.
func TestGrantsThatGoBackKeepTheirOrder(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 100000, Window: time.Second}
	d, rdb, ac := rig(t, q)
	k := d.keysFor("default")
	parkBehindAFullQueue(t, d, ac, q, "a", "b", "c")
	rdb.LTrim(ctx, k.pending, 1, 0) // the three ahead of them ran
	picks := d.turnRaw(ctx, t, 2, 0, 0, 0, 0, 0)
	if len(picks) != 2 || picks[0].entry.id != "a" || picks[1].entry.id != "b" {
		t.Fatalf("granted %+v, want a and b", picks)
	}
	if err := d.move(ctx, "default", []moveOp{{op: opBack, id: "a", sleep: time.Millisecond}, {op: opBack, id: "b", sleep: time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range rdb.LRange(ctx, k.prefix+"w:t", 0, -1).Val() {
		e, err := parseWaitingEntry(s)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.id)
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(ids, want) {
		t.Errorf("t's line after both went back: %q, want %q", ids, want)
	}
}

// A task admitted ahead (a hand-off's claim) behind one the rate defers
// goes back behind it, rather than in before it: when a turn grants both,
// the first is deferred (the slot ahead of it fills the window) and the
// second, admitted already, would otherwise start first.
func TestATaskAdmittedAheadGoesBackBehindADeferredOne(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 1, Window: time.Minute, MaxDelay: time.Hour}
	d, rdb, ac := rig(t, q)
	k := d.keysFor("default")
	parkBehindAFullQueue(t, d, ac, q, "a", "b")
	// b is admitted ahead, as a hand-off's claim may be: the window is full.
	if ds, err := d.gate.AdmitBatchAt(ctx, "t", []string{"b"}, time.Time{}); err != nil || ds[0].Outcome != admission.Admitted {
		t.Fatalf("b ahead: %+v %v", ds, err)
	}
	rdb.LTrim(ctx, k.pending, 1, 0)
	picks := d.turnRaw(ctx, t, 2, 0, 0, 0, 0, 0)
	if len(picks) != 2 {
		t.Fatalf("granted %+v, want a and b", picks)
	}
	ops := d.admit(ctx, "default", picks)
	for i, o := range ops {
		if o.op != opBack {
			t.Errorf("%s: op %s, want back (a is deferred, and b goes behind it)", picks[i].entry.id, o.op)
		}
	}
	if err := d.move(ctx, "default", ops); err != nil {
		t.Fatal(err)
	}
	if n := rdb.LLen(ctx, k.pending).Val(); n != 0 {
		t.Errorf("%d tasks went into the queue, want none", n)
	}
	if w := rdb.LLen(ctx, k.prefix+"w:t").Val(); w != 2 {
		t.Errorf("t's line holds %d, want a and b back", w)
	}
}

// parkBehindAFullQueue records a fair worker of concurrency 1 on queue
// default, fills the queue with three tasks of its own, and parks tasks
// ids of tenant t under quota q behind them, written parked.
func parkBehindAFullQueue(t *testing.T, d *Dispatcher, ac *asynq.Client, q admission.Quota, ids ...string) {
	t.Helper()
	d.fairWorker(t, 1)
	for _, id := range []string{"f1", "f2", "f3"} { // the queue is full: every park waits
		if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if tk, err := d.Park(context.Background(), Task{Queue: "default", Tenant: "t", ID: id}, q); err != nil || tk.Verdict != Wait {
			t.Fatalf("%s: %v %v", id, tk.Verdict, err)
		}
		if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id), asynq.ProcessAt(ParkedUntil)); err != nil {
			t.Fatal(err)
		}
	}
}
