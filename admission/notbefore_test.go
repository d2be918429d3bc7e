package admission

import (
	"context"
	"testing"
	"time"
)

// TestAdmitAt: work that starts later is charged for when it starts, in
// both modes: its slot is the first free one from its own time and after
// every slot given before (FIFO), MaxDelay counts from its own time, a
// time that has passed is no time at all, and the deny cache, which
// speaks of requests that start now, never answers for it.
func TestAdmitAt(t *testing.T) {
	for _, mode := range []Mode{Log, Counter} {
		t.Run(mode.String(), func(t *testing.T) {
			q := Quota{Limit: 1, Window: 10 * time.Second, MaxDelay: 5 * time.Second, Mode: mode}
			g, mr, _ := clockedGate(t, q, WithDenyCache(true))
			// Far ahead of the local clock, so that not-before times on
			// Redis's clock are ahead of the local one too.
			t0 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
			mr.SetTime(t0)
			ctx := context.Background()
			want := func(desc string, d Decision, err error, o Outcome, at time.Time) {
				t.Helper()
				if err != nil || d.Outcome != o || !d.At.Equal(at) || d.Local {
					t.Fatalf("%s: %+v, %v; want %v at %v from Redis", desc, d, err, o, at)
				}
			}
			d, err := g.AdmitAt(ctx, "n", "a", t0.Add(time.Hour))
			want("a: an hour ahead on an idle tenant, MaxDelay 5s", d, err, Deferred, t0.Add(time.Hour))
			d, err = g.Admit(ctx, "n")
			if err != nil || d.Outcome != Rejected {
				t.Fatalf("b, now: %+v, %v; want rejected: it would queue an hour behind a", d, err)
			}
			d, err = g.AdmitAt(ctx, "n", "c", t0.Add(time.Hour+7*time.Second))
			at := t0.Add(time.Hour + 10*time.Second) // the first free slot a window after a
			if mode == Counter {
				at = t0.Add(time.Hour + 11*time.Second) // and the whole bucket of a
			}
			want("c: 7s after a, MaxDelay 5s from its own time", d, err, Deferred, at)
			d, err = g.AdmitAt(ctx, "n", "e", t0.Add(time.Hour+time.Second))
			if err != nil || d.Outcome != Rejected || d.Local || d.At.Before(t0.Add(time.Hour)) {
				t.Fatalf("e: 1s after a, behind c: %+v, %v; want rejected by Redis, retry no sooner than a", d, err)
			}
			d, err = g.AdmitAt(ctx, "n", "f", t0.Add(-time.Minute))
			if err != nil || d.Outcome != Rejected {
				t.Fatalf("f, a time that has passed: %+v, %v; want rejected as if now", d, err)
			}
			mr.SetTime(t0.Add(2 * time.Hour))
			d, err = g.AdmitAt(ctx, "n", "g", t0.Add(time.Hour))
			want("g: its time has passed, the window is empty", d, err, Admitted, t0.Add(2*time.Hour))
		})
	}
}
