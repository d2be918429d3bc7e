package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestParkedTaskKeepsItsNotBefore: a capped tenant's task parked with a
// not-before time an hour ahead is granted the next permit at that time,
// not at once, and holds the permit meanwhile; the task parked after it
// stays parked until it gives the permit back, and then gets a slot no
// earlier than its. A parked task given back before its grant leaves no
// not-before time behind, nor does a granted one.
func TestParkedTaskKeepsItsNotBefore(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	q := admission.Quota{Limit: 100, Window: time.Minute, MaxInFlight: 1}
	g := admission.New(rdb, admission.StaticQuotas{Default: &q})
	p := g.Permits()
	ctx := context.Background()
	a, b, c, x, f := refs("a", 1)[0], refs("b", 1)[0], refs("c", 1)[0], refs("x", 1)[0], refs("f", 1)[0]
	nb := time.Now().Add(time.Hour).Truncate(time.Second)
	admit := func(r admission.Ref, at time.Time, want admission.Outcome) {
		t.Helper()
		ds, err := g.AdmitTasksAt(ctx, "t", []admission.Ref{r}, at)
		if err != nil || ds[0].Outcome != want {
			t.Fatalf("admit %s: %+v, %v; want %v", r.ID, ds, err, want)
		}
	}
	admit(a, time.Time{}, admission.Admitted)
	admit(b, nb, admission.Parked)
	admit(c, time.Time{}, admission.Parked)
	admit(x, nb, admission.Parked)
	far := time.Date(3000, time.January, 1, 0, 0, 0, 0, time.UTC)
	admit(f, far, admission.Parked)

	const timesKey = "admitq:{t}:notbefore"
	// x's producer failed to write it (enqueue gives its place back).
	if dep, err := p.Finish(ctx, "t", x); err != nil || len(dep.Grants) != 0 || dep.Parked != 3 {
		t.Fatalf("Finish(x): %+v, %v; want no grant, 3 parked", dep, err)
	}
	if left, err := rdb.HKeys(ctx, timesKey).Result(); err != nil || len(left) != 2 {
		t.Fatalf("not-before times after x went: %q, %v; want b's and f's", left, err)
	}

	dep, err := p.Finish(ctx, "t", a)
	if err != nil {
		t.Fatal(err)
	}
	if len(dep.Grants) != 1 || dep.Grants[0].Ref != b || !dep.Grants[0].At.Equal(nb) || dep.InFlight != 1 || dep.Parked != 2 {
		t.Fatalf("Finish(a): %+v; want b granted at %v, 1 in flight, 2 parked", dep, nb)
	}
	// b holds its permit while it waits for its time: nothing for c, and
	// nothing due or lapsed.
	dep, err = p.Reconcile(ctx, "t")
	if err != nil || len(dep.Grants) != 0 || len(dep.Due) != 0 || len(dep.Lapsed) != 0 || dep.InFlight != 1 || dep.Parked != 2 {
		t.Fatalf("Reconcile while b waits: %+v, %v; want nothing granted, due or lapsed; 1 in flight, 2 parked", dep, err)
	}
	dep, err = p.Finish(ctx, "t", b)
	if err != nil || len(dep.Grants) != 1 || dep.Grants[0].Ref != c || dep.Grants[0].At.Before(nb) {
		t.Fatalf("Finish(b): %+v, %v; want c granted no earlier than b's %v", dep, err, nb)
	}
	// A time a thousand years ahead, past float64's exact µs, is kept to
	// within a millisecond, and its task is neither due nor lapsed: it
	// holds its permit until then, and is granted once.
	dep, err = p.Finish(ctx, "t", c)
	if err != nil || len(dep.Grants) != 1 || dep.Grants[0].Ref != f || dep.Grants[0].At.Sub(far).Abs() > time.Millisecond || dep.Parked != 0 {
		t.Fatalf("Finish(c): %+v, %v; want f granted at %v", dep, err, far)
	}
	dep, err = p.Reconcile(ctx, "t")
	if err != nil || len(dep.Grants) != 0 || len(dep.Due) != 0 || len(dep.Lapsed) != 0 || dep.InFlight != 1 {
		t.Fatalf("Reconcile while f waits: %+v, %v; want nothing granted, due or lapsed, 1 in flight", dep, err)
	}
	if dep, err = p.Finish(ctx, "t", f); err != nil || dep.InFlight != 0 || dep.Parked != 0 || len(dep.Grants) != 0 {
		t.Fatalf("Finish(f): %+v, %v; want nothing left", dep, err)
	}
	if n, err := rdb.Exists(ctx, timesKey).Result(); err != nil || n != 0 {
		t.Fatalf("not-before times left after every grant: %d, %v", n, err)
	}
}
