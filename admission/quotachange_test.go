package admission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// switchQuotas is a quota table of one quota that a test changes at will,
// as an operator's edit reaches a gate.
type switchQuotas struct {
	mu sync.Mutex
	q  Quota
}

func (s *switchQuotas) set(q Quota) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.q = q
}

func (s *switchQuotas) Quota(context.Context, string) (Quota, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q, nil
}

// switchedGate is clockedGate with quotas the test changes.
func switchedGate(t *testing.T, q Quota) (*Gate, *switchQuotas, func(time.Time)) {
	t.Helper()
	g, mr, _ := clockedGate(t, q)
	mr.ClockTTL(true) // expiry follows SetTime, as in Redis: admit.lua reads it back
	sq := &switchQuotas{q: q}
	g.quotas = sq
	return g, sq, mr.SetTime
}

// TestQuotaChangeKeepsCounts is issue 11's A1: a change of Window, either
// way, must not forget what the tenant was given. 5 per 100 s admits 5;
// the quota becomes 5 per 10 s (or the reverse), and the next request at
// once must find the window full, in both modes.
func TestQuotaChangeKeepsCounts(t *testing.T) {
	for _, mode := range []Mode{Log, Counter} {
		for _, c := range []struct {
			desc     string
			from, to time.Duration
		}{
			{"window shrinks 100s to 10s", 100 * time.Second, 10 * time.Second},
			{"window grows 10s to 100s", 10 * time.Second, 100 * time.Second},
			// Not 1h: miniredis's Lua grows a table's array part up to
			// an integer key, and a bucket of 6min numbers ~5M.
			{"window grows 1ms to 1000h", time.Millisecond, 1000 * time.Hour},
			{"window shrinks 1000h to 1ms", 1000 * time.Hour, time.Millisecond},
		} {
			t.Run(mode.String()+"/"+c.desc, func(t *testing.T) {
				g, sq, setTime := switchedGate(t, Quota{Limit: 5, Window: c.from, Mode: mode})
				t0 := time.Unix(1_780_000_000, 123_456_000)
				setTime(t0)
				ctx := context.Background()
				ds, err := g.AdmitBatch(ctx, "t", []string{"a", "b", "c", "d", "e"})
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range ds {
					if d.Outcome != Admitted {
						t.Fatalf("before the change: %v, want all 5 admitted", d.Outcome)
					}
				}
				sq.set(Quota{Limit: 5, Window: c.to, Mode: mode})
				setTime(t0.Add(min(c.from, c.to) / 2)) // within both windows
				ds, err = g.AdmitBatch(ctx, "t", []string{"f", "g", "h", "i", "j"})
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range ds {
					if d.Outcome != Rejected {
						t.Fatalf("after the change, within the new window: %v at %v, want rejected: the 5 given before still count", d.Outcome, d.At)
					}
				}
			})
		}
	}
}

// TestCounterReleaseAfterWindowChange: Release finds the bucket a slot was
// counted in with the width the buckets were counted with, not with the
// width of the quota's new window.
func TestCounterReleaseAfterWindowChange(t *testing.T) {
	g, sq, setTime := switchedGate(t, Quota{Limit: 2, Window: 10 * time.Second, Mode: Counter})
	t0 := time.Unix(1_780_000_000, 700_000_000)
	setTime(t0)
	ctx := context.Background()
	ds, err := g.AdmitBatch(ctx, "r", []string{"a", "b"})
	if err != nil || ds[1].Outcome != Admitted {
		t.Fatalf("AdmitBatch = %+v, %v; want both admitted", ds, err)
	}
	sq.set(Quota{Limit: 2, Window: 100 * time.Second, Mode: Counter})
	if err := g.Release(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	setTime(t0.Add(time.Second))
	if d, err := g.Admit(ctx, "r"); err != nil || d.Outcome != Admitted {
		t.Fatalf("after releasing one of two: %+v, %v; want admitted", d, err)
	}
	if d, err := g.Admit(ctx, "r"); err != nil || d.Outcome != Rejected {
		t.Fatalf("with two in the window: %+v, %v; want rejected", d, err)
	}
}

// TestBoundAcrossQuotaChanges drives both modes through random traffic
// while the quota's Limit and Window change at random, one decision to the
// next (as while gates disagree), with not-before times and releases, on an
// exact clock. Every decision must honour its own quota: a slot t given
// under (L, W) finds fewer than L slots in (t-W, t] among those still
// recorded, where, as in the log, a decision drops the slots that have left
// its own window (<= now-W). Slots never go backwards, and none is further
// than MaxDelay past its request's start.
func TestBoundAcrossQuotaChanges(t *testing.T) {
	for _, mode := range []Mode{Log, Counter} {
		for seed := range uint64(8) {
			t.Run(fmt.Sprintf("%v/seed=%d", mode, seed), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 3))
				quota := func() Quota {
					return Quota{
						Limit:    1 + r.IntN(6),
						Window:   time.Duration(1+r.IntN(2000)) * time.Millisecond,
						MaxDelay: time.Duration(r.IntN(4000)) * time.Millisecond,
						Mode:     mode,
					}
				}
				qs := []Quota{quota(), quota(), quota()}
				g, sq, setTime := switchedGate(t, qs[0])
				now := time.Unix(1_780_000_000, 0).Add(time.Duration(r.IntN(1e6)) * time.Microsecond)
				ctx := context.Background()
				recorded := map[string]int64{} // ID -> slot µs
				var given []Decision           // not yet released
				var newest int64
				id := 0
				for step := range 300 {
					now = now.Add(time.Duration(r.ExpFloat64() * float64(50*time.Millisecond)))
					setTime(now)
					if r.IntN(8) == 0 && len(given) > 0 {
						i := r.IntN(len(given))
						if err := g.Release(ctx, given[i]); err != nil {
							t.Fatal(err)
						}
						delete(recorded, given[i].ID)
						given = append(given[:i], given[i+1:]...)
						if mode == Log { // FIFO holds Release aside: the log's newest may go back
							newest = 0
							for _, s := range recorded {
								newest = max(newest, s)
							}
						}
						continue
					}
					q := qs[r.IntN(len(qs))]
					sq.set(q)
					var nb time.Time
					start := now.UnixMicro()
					if r.IntN(4) == 0 {
						nb = now.Add(time.Duration(r.Int64N(int64(3 * q.Window))))
						start = nb.UnixMicro()
					}
					ids := make([]string, 1+r.IntN(3))
					for i := range ids {
						id++
						ids[i] = fmt.Sprint("x", id)
					}
					ds, err := g.AdmitBatchAt(ctx, "b", ids, nb)
					if err != nil {
						t.Fatal(err)
					}
					cut := now.UnixMicro() - q.Window.Microseconds()
					for k, s := range recorded {
						if s <= cut {
							delete(recorded, k)
						}
					}
					for _, d := range ds {
						if d.Outcome == Rejected {
							continue
						}
						at := d.At.UnixMicro()
						if at < newest {
							t.Fatalf("step %d: slot %v before the earlier slot %v", step, d.At, time.UnixMicro(newest))
						}
						if at-start > q.MaxDelay.Microseconds() {
							t.Fatalf("step %d: slot %v is more than MaxDelay %v past its start %v", step, d.At, q.MaxDelay, time.UnixMicro(start))
						}
						in := 0
						for _, s := range recorded {
							if s > at-q.Window.Microseconds() && s <= at {
								in++
							}
						}
						if in >= q.Limit {
							t.Fatalf("step %d: quota %v gave %v, with %d slots already in the window before it", step, q, d.At, in)
						}
						newest = at
						recorded[d.ID] = at
						given = append(given, d)
					}
				}
			})
		}
	}
}

// TestReleaseAcrossModeChange: a slot taken in Log mode and released after
// the quota changed to Counter leaves the log, and the counter, which never
// counted it, gives nothing back.
func TestReleaseAcrossModeChange(t *testing.T) {
	g, sq, setTime := switchedGate(t, Quota{Limit: 1, Window: 10 * time.Second})
	t0 := time.Unix(1_780_000_000, 0)
	setTime(t0)
	ctx := context.Background()
	logged, err := g.AdmitID(ctx, "m", "logged")
	if err != nil || logged.Outcome != Admitted {
		t.Fatalf("AdmitID in Log mode = %+v, %v", logged, err)
	}
	sq.set(Quota{Limit: 1, Window: 10 * time.Second, Mode: Counter})
	if d, err := g.Admit(ctx, "m"); err != nil || d.Outcome != Admitted {
		t.Fatalf("Admit in Counter mode = %+v, %v; want admitted: the modes keep apart", d, err)
	}
	if err := g.Release(ctx, logged); err != nil {
		t.Fatal(err)
	}
	if n := g.rdb.ZCard(ctx, logKey("admitq", "m")).Val(); n != 0 {
		t.Fatalf("the log holds %d entries after the release, want 0", n)
	}
	if d, err := g.Admit(ctx, "m"); err != nil || d.Outcome != Rejected {
		t.Fatalf("Admit in Counter mode after releasing the log's slot = %+v, %v; want rejected: the counter's own slot stays", d, err)
	}
}
