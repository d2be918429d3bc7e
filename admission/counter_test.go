package admission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// onMini starts a miniredis for t, for exact timelines, and a client of it.
// miniredis's Lua does not read a shebang line, which Redis 7 takes from a
// script's first line; the client drops it from EVAL and SCRIPT LOAD (the
// script then has another hash there, so EVALSHA falls back to EVAL).
func onMini(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	rdb.AddHook(noShebang{})
	t.Cleanup(func() { rdb.Close() })
	return mr, rdb
}

// noShebang is the go-redis hook onMini's clients carry.
type noShebang struct{}

func (noShebang) DialHook(next redis.DialHook) redis.DialHook { return next }

func (noShebang) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		dropShebang(cmd)
		return next(ctx, cmd)
	}
}

func (noShebang) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			dropShebang(cmd)
		}
		return next(ctx, cmds)
	}
}

// dropShebang blanks the shebang of an EVAL's or SCRIPT LOAD's script,
// keeping its line so that errors name the same lines.
func dropShebang(cmd redis.Cmder) {
	args := cmd.Args()
	i := 1 // EVAL script ...
	if name := strings.ToLower(cmd.Name()); name == "script" {
		i = 2 // SCRIPT LOAD script
	} else if name != "eval" && name != "eval_ro" {
		return
	}
	if len(args) > i {
		if src, ok := args[i].(string); ok && strings.HasPrefix(src, "#!") {
			_, body, _ := strings.Cut(src, "\n")
			args[i] = "\n" + body
		}
	}
}

// clockedGate returns a gate on miniredis, whose clock the test sets.

func clockedGate(t *testing.T, q Quota, opts ...Option) (*Gate, *miniredis.Miniredis, *redis.Client) {
	t.Helper()
	mr, rdb := onMini(t)
	// miniredis runs Lua slowly, and slower still under -race on a busy
	// machine: a generous timeout keeps these tests about the timeline.
	g := New(rdb, StaticQuotas{Default: &q}, append([]Option{WithBatching(false), WithDenyCache(false), WithTimeout(5 * time.Second)}, opts...)...)
	t.Cleanup(func() { g.Close() })
	return g, mr, rdb
}

// maxInWindow is the most slots any interval (t-W, t] holds.
func maxInWindow(slots []int64, w time.Duration) int {
	slices.Sort(slots)
	best, lo := 0, 0
	for hi, s := range slots {
		for slots[lo] <= s-w.Microseconds() {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// TestCounterModeBound drives Counter mode through random traffic, with
// deferrals, rejections and granularity, on an exact clock: no interval of
// length Window may hold more than Limit slots, and slots never go back.
func TestCounterModeBound(t *testing.T) {
	for seed := range uint64(16) {
		r := rand.New(rand.NewPCG(seed, 11))
		q := Quota{
			Limit:    1 + r.IntN(20),
			Window:   time.Duration(10+r.IntN(990)) * time.Millisecond,
			MaxDelay: time.Duration(r.IntN(3000)) * time.Millisecond,
			Mode:     Counter,
		}
		gran := []time.Duration{time.Microsecond, time.Millisecond, time.Second}[r.IntN(3)]
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			g, mr, _ := clockedGate(t, q, WithGranularity(gran))
			now := time.Unix(1_780_000_000, 0).Add(time.Duration(r.IntN(1e6)) * time.Microsecond)
			var slots []int64
			var last int64
			for range 250 {
				now = now.Add(time.Duration(r.ExpFloat64() * float64(q.Window) / float64(q.Limit) / 2))
				mr.SetTime(now)
				ids := make([]string, 1+r.IntN(3))
				for i := range ids {
					ids[i] = "x"
				}
				ds, err := g.AdmitBatch(context.Background(), "c", ids)
				if err != nil {
					t.Fatal(err)
				}
				rejected := false
				for _, d := range ds {
					if d.Outcome == Rejected {
						rejected = true
						continue
					}
					if rejected {
						t.Fatalf("%v after a rejection in the same batch", d.Outcome)
					}
					at := d.At.UnixMicro()
					if at < last {
						t.Fatalf("slot %v before the earlier slot %v", d.At, time.UnixMicro(last))
					}
					if d.Outcome == Deferred && (at%gran.Microseconds() != 0 || d.Delay() > q.MaxDelay+gran) {
						t.Fatalf("deferred to %v: not a multiple of %v or beyond MaxDelay %v", d.At, gran, q.MaxDelay)
					}
					last = at
					slots = append(slots, at)
				}
			}
			if got := maxInWindow(slots, q.Window); got > q.Limit {
				t.Fatalf("quota %v: %d slots in one window", q, got)
			}
		})
	}
}

// TestModeAccuracy runs the same boundary-heavy traffic, a burst of 1.5×
// Limit just before and just after every window edge, through the log, the
// counter mode and a classic fixed-window counter, and reports the most
// admissions each let into any window of length W. The log is exact, the
// counter mode never exceeds the limit, and the fixed window lets through
// nearly twice the limit at each edge.
func TestModeAccuracy(t *testing.T) {
	const limit = 100
	w := time.Second
	start := time.Unix(1_780_000_000, 0)
	traffic := func(yield func(time.Time) bool) {
		for k := 1; k <= 5; k++ {
			edge := start.Add(time.Duration(k) * w)
			for _, at := range []time.Time{edge.Add(-time.Millisecond), edge.Add(time.Millisecond)} {
				for range limit * 3 / 2 {
					if !yield(at) {
						return
					}
				}
			}
		}
	}
	run := func(mode Mode) (peak, admitted int) {
		g, mr, _ := clockedGate(t, Quota{Limit: limit, Window: w, Mode: mode})
		var slots []int64
		for at := range traffic {
			mr.SetTime(at)
			d, err := g.Admit(context.Background(), "edge")
			if err != nil {
				t.Fatal(err)
			}
			if d.Outcome == Admitted {
				slots = append(slots, d.At.UnixMicro())
			}
		}
		return maxInWindow(slots, w), len(slots)
	}
	fixed := func() (peak, admitted int) {
		_, rdb := onMini(t)
		var slots []int64
		for at := range traffic {
			key := "fixed:" + strconv.FormatInt(at.UnixMicro()/w.Microseconds(), 10)
			if n := rdb.Incr(context.Background(), key).Val(); n <= limit {
				slots = append(slots, at.UnixMicro())
			}
		}
		return maxInWindow(slots, w), len(slots)
	}
	logPeak, logN := run(Log)
	ctrPeak, ctrN := run(Counter)
	fixPeak, fixN := fixed()
	t.Logf("most admissions in any %v window at limit %d: log %d (%.2f×), counter %d (%.2f×), fixed window %d (%.2f×)",
		w, limit, logPeak, float64(logPeak)/limit, ctrPeak, float64(ctrPeak)/limit, fixPeak, float64(fixPeak)/limit)
	t.Logf("admitted of %d sent: log %d, counter %d (%.0f%% of the log's), fixed window %d", 5*2*limit*3/2, logN, ctrN, 100*float64(ctrN)/float64(logN), fixN)
	if logPeak != limit {
		t.Errorf("log: %d in a window, want exactly %d", logPeak, limit)
	}
	if ctrPeak > limit {
		t.Errorf("counter: %d in a window, want at most %d", ctrPeak, limit)
	}
	if fixPeak < limit*19/10 {
		t.Errorf("fixed window: %d in a window; the baseline should show its edge burst", fixPeak)
	}
}

// TestCounterModeUsageAndRelease: Usage reads the buckets without writing,
// and Release gives entries back, never below zero.
func TestCounterModeUsageAndRelease(t *testing.T) {
	q := Quota{Limit: 2, Window: time.Second, MaxDelay: 2 * time.Second, Mode: Counter}
	g, mr, rdb := clockedGate(t, q)
	now := time.Unix(1_780_000_000, 500_000_000)
	mr.SetTime(now)
	ctx := context.Background()
	ds, err := g.AdmitBatch(ctx, "u", []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if ds[2].Outcome != Deferred {
		t.Fatalf("third = %v, want deferred", ds[2].Outcome)
	}
	before, _ := rdb.HGetAll(ctx, "admitq:{u}:cnt").Result()
	u, err := g.Usage(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	if u.InWindow != 2 || u.Reserved != 1 || u.NextFree.Before(ds[2].At) {
		t.Fatalf("Usage = %+v, want 2 in the window, 1 ahead, next free not before %v", u, ds[2].At)
	}
	if after, _ := rdb.HGetAll(ctx, "admitq:{u}:cnt").Result(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("Usage wrote: %v -> %v", before, after)
	}
	if err := g.Release(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	if u, _ := g.Usage(ctx, "u"); u.InWindow != 1 {
		t.Fatalf("after releasing one of two: %d in the window, want 1", u.InWindow)
	}
	for range 2 { // the bucket is empty after the first: the second gives nothing back
		if err := g.Release(ctx, ds[1]); err != nil {
			t.Fatal(err)
		}
	}
	if u, _ := g.Usage(ctx, "u"); u.InWindow != 0 || u.Reserved != 1 {
		t.Fatalf("after releasing more than the bucket had: %d in the window and %d ahead, want 0 and 1", u.InWindow, u.Reserved)
	}
	if d, _ := g.Admit(ctx, "u"); d.Outcome != Deferred {
		t.Fatalf("after a release, FIFO still holds: %v, want deferred behind the reservation", d.Outcome)
	}
}

// TestDenyCachePerGranularity: gates that share state through
// AtGranularity do not share retry hints, which depend on rounding. A hint
// from a one-second gate says a request is rejected until the window's
// slot rounded up to the second, less MaxDelay; at one microsecond Redis
// would defer it well before that.
func TestDenyCachePerGranularity(t *testing.T) {
	q := Quota{Limit: 1, Window: time.Second, MaxDelay: 500 * time.Millisecond}
	g, mr, _ := clockedGate(t, q, WithDenyCache(true))
	seconds := g.AtGranularity(time.Second)
	t0 := time.Unix(1_780_000_000, 300_000_000)
	mr.SetTime(t0)
	ctx := context.Background()
	if d, err := seconds.Admit(ctx, "g"); err != nil || d.Outcome != Admitted {
		t.Fatalf("Admit at 1s granularity = %+v, %v; want admitted", d, err)
	}
	mr.SetTime(t0.Add(900 * time.Millisecond))
	d, err := g.Admit(ctx, "g")
	if err != nil || d.Outcome != Deferred || d.Local || !d.At.Equal(t0.Add(time.Second)) {
		t.Fatalf("Admit at 1µs granularity = %+v, %v; want deferred by Redis to %v", d, err, t0.Add(time.Second))
	}
}
