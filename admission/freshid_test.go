package admission_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/freshid"
	"github.com/admitq/admitq/internal/redistest"
)

// TestAbandonedFreshIDHoldsNoSlot: IDs the caller marks as its own new ones
// (freshid, as package enqueue does for the task IDs it makes) are given
// back like the gate's own when the caller leaves before the decision: no
// retry can ever ask for them. Redis is paused so that every call leaves
// while its script waits.
func TestAbandonedFreshIDHoldsNoSlot(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	g := admission.New(srv.Client(t), static(admission.Quota{Limit: 1000, Window: time.Minute}))
	defer g.Close()
	if _, err := g.AdmitID(t.Context(), "warm", "up"); err != nil { // connections up before the pause
		t.Fatal(err)
	}
	srv.Pause()
	for i := range 5 {
		ctx, cancel := context.WithTimeout(freshid.Mark(t.Context()), 20*time.Millisecond)
		_, err := g.AdmitID(ctx, "fresh", "id"+strconv.Itoa(i))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("AdmitID on a paused Redis = %v, want context.DeadlineExceeded", err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	srv.Resume()
	deadline := time.Now().Add(5 * time.Second)
	for n := int64(-1); n != 0; n = rdb.ZCard(t.Context(), "admitq:{fresh}:log").Val() {
		if time.Now().After(deadline) {
			t.Fatalf("the log holds %d entries of abandoned calls, want none", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAbandonedCappedCallHoldsNothing: a capped tenant's call of fresh IDs
// that leaves while Redis is paused holds nothing once it resumes: no slot,
// no permit, no place among the parked and no not-before time, where
// before its tasks held their permits until the leases lapsed (and parked
// ones until handed a permit). A call of the caller's own IDs keeps what
// it took, for its retry.
func TestAbandonedCappedCallHoldsNothing(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	// A lease far longer than the test: only the give-back can free them.
	g := admission.New(srv.Client(t), static(admission.Quota{Limit: 1000, Window: time.Minute, MaxInFlight: 2}),
		admission.WithPermitLease(time.Hour))
	defer g.Close()
	if _, err := g.AdmitID(t.Context(), "warm", "up"); err != nil { // connections up before the pause
		t.Fatal(err)
	}
	ids := func(tenant string) map[string]int64 {
		n := map[string]int64{}
		for _, k := range []string{"log", "permits", "parked", "notbefore"} {
			n[k] = rdb.Exists(t.Context(), "admitq:{"+tenant+"}:"+k).Val()
		}
		return n
	}
	// Five tasks for two permits, in one call, so that all of them are
	// sent (the gate's two pipelines in flight wait for Redis, and calls
	// that leave before a pipeline is free are never sent): two take the
	// permits, three park, with a not-before time that parked tasks keep
	// in a hash.
	refs := make([]admission.Ref, 5)
	for i := range refs {
		refs[i] = admission.Ref{ID: "id" + strconv.Itoa(i), Queue: "q"}
	}
	srv.Pause()
	for _, tenant := range []string{"fresh", "own"} {
		ctx := t.Context()
		if tenant == "fresh" {
			ctx = freshid.Mark(ctx)
		}
		// Well inside the gate's timeout (250 ms): the caller leaves
		// first, for good, with its ctx's error.
		ctx, cancel := context.WithTimeout(ctx, 60*time.Millisecond)
		_, err := g.AdmitTasksAt(ctx, tenant, refs, time.Now().Add(time.Second))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("AdmitTasksAt on a paused Redis = %v, want context.DeadlineExceeded", err)
		}
	}
	time.Sleep(30 * time.Millisecond)
	srv.Resume()
	deadline := time.Now().Add(5 * time.Second)
	for left := ids("fresh"); left["log"]+left["permits"]+left["parked"]+left["notbefore"] > 0; left = ids("fresh") {
		if time.Now().After(deadline) {
			t.Fatalf("abandoned calls of fresh IDs left these keys of the tenant: %v, want none", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// And not because the call never went out: only the give-back sends
	// HDEL, for the not-before times of the tasks that parked.
	if stats := rdb.Info(t.Context(), "commandstats").Val(); !strings.Contains(stats, "cmdstat_hdel:calls=") {
		t.Errorf("no HDEL reached Redis: the fresh call was never sent, or its parked tasks never given back")
	}
	if u, err := g.Usage(t.Context(), "own"); err != nil || u.InFlight != 2 || u.Parked != 3 {
		t.Errorf("the caller's own IDs: %d in flight, %d parked (%v), want 2 and 3: a retry of them finds its place", u.InFlight, u.Parked, err)
	}
}

// TestCappedCallTheGateGaveUpOn: a capped call of fresh IDs whose wait
// the gate's own timeout ends, on a Redis that answers later. Under
// FailOpen the caller gets decisions made without Redis and writes its
// tasks, so what the script took for them when Redis answered must stay:
// the tasks rely on it. Under FailClosed the caller gets an error and
// writes nothing, so it is given back.
func TestCappedCallTheGateGaveUpOn(t *testing.T) {
	for _, policy := range []admission.FailurePolicy{admission.FailOpen, admission.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			g := admission.New(srv.Client(t), static(admission.Quota{Limit: 1000, Window: time.Minute, MaxInFlight: 2}),
				admission.WithPermitLease(time.Hour), admission.WithTimeout(50*time.Millisecond),
				admission.WithFailurePolicy(policy))
			defer g.Close()
			if _, err := g.AdmitID(t.Context(), "warm", "up"); err != nil { // connections up before the pause
				t.Fatal(err)
			}
			refs := make([]admission.Ref, 5)
			for i := range refs {
				refs[i] = admission.Ref{ID: "id" + strconv.Itoa(i), Queue: "q"}
			}
			before := scriptCalls(t, rdb) // commit_test.go
			srv.Pause()
			ds, err := g.AdmitTasks(freshid.Mark(t.Context()), "t", refs)
			if policy == admission.FailOpen && (err != nil || len(ds) != 5 || !ds[0].Local) {
				t.Fatalf("AdmitTasks on a paused Redis = %+v, %v; want local decisions", ds, err)
			}
			if policy == admission.FailClosed && !errors.Is(err, admission.ErrUnavailable) {
				t.Fatalf("AdmitTasks on a paused Redis = %+v, %v; want ErrUnavailable", ds, err)
			}
			time.Sleep(50 * time.Millisecond)
			srv.Resume()
			// The script runs once Redis resumes (the INFO calls between
			// are not scripts): two permits, three parked.
			deadline := time.Now().Add(5 * time.Second)
			for scriptCalls(t, rdb) == before {
				if time.Now().After(deadline) {
					t.Fatal("the call's script never ran")
				}
				time.Sleep(10 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // a give-back would have landed
			held := rdb.ZCard(t.Context(), "admitq:{t}:permits").Val()
			parked := rdb.ZCard(t.Context(), "admitq:{t}:parked").Val()
			logged := rdb.ZCard(t.Context(), "admitq:{t}:log").Val()
			want := [3]int64{2, 3, 2}
			if policy == admission.FailClosed {
				want = [3]int64{}
			}
			if got := [3]int64{held, parked, logged}; got != want {
				t.Errorf("permits held, tasks parked and log entries after the script ran: %v, want %v", got, want)
			}
		})
	}
}
