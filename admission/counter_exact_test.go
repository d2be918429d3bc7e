package admission

// Counter mode (counter_prelude.lua, counter.lua, counter_usage.lua,
// counter_release.lua) on a real redis-server at an exact clock.
//
// The harness runs the scripts on a real redis-server with an exact clock:
// it assembles each script as package lua does (and checks the hash), then
// swaps the prelude's `call('TIME')` for the last two ARGV (seconds,
// microseconds), which the scripts otherwise ignore. Variants drop the
// header fast path or the struct codec, for differential runs.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

func rvSrc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "lua", name))
	if err != nil {
		t.Fatal(err)
	}
	p, err := os.ReadFile(filepath.Join("..", "lua", "counter_prelude.lua"))
	if err != nil {
		t.Fatal(err)
	}
	shebang, body, _ := strings.Cut(string(b), "\n")
	return shebang + "\n" + string(p) + body
}

func rvReplace(t *testing.T, src, old, new string) string {
	t.Helper()
	if strings.Count(src, old) != 1 {
		t.Fatalf("patch: %q occurs %d times", old, strings.Count(src, old))
	}
	return strings.Replace(src, old, new, 1)
}

type rvVariant int

const (
	rvAsIs     rvVariant = iota // struct codec and header fast path, as on Redis
	rvNoFast                    // struct codec, no header fast path
	rvTextOnly                  // text codec (as on miniredis)
)

type rvScripts struct{ counter, usage, release *redis.Script }

func rvLoad(t *testing.T, v rvVariant) rvScripts {
	t.Helper()
	var s [3]*redis.Script
	for i, c := range []struct {
		name string
		real *redis.Script
	}{{"counter.lua", lua.Counter()}, {"counter_usage.lua", lua.CounterUsage()}, {"counter_release.lua", lua.CounterRelease()}} {
		src := rvSrc(t, c.name)
		if h := redis.NewScript(src).Hash(); h != c.real.Hash() {
			t.Fatalf("%s assembled with hash %s, package lua's is %s", c.name, h, c.real.Hash())
		}
		src = rvReplace(t, src, "local t = call('TIME')", "local t = {ARGV[#ARGV - 1], ARGV[#ARGV]}")
		if v == rvNoFast && c.name == "counter.lua" {
			src = rvReplace(t, src, "if v and HEADER then", "if false then")
		}
		if v == rvTextOnly {
			src = rvReplace(t, src, "local struct = rawget(_G, 'struct')", "local struct = nil")
		}
		s[i] = redis.NewScript(src)
	}
	return rvScripts{s[0], s[1], s[2]}
}

// rv runs the scripts on one server at an exact clock.
type rv struct {
	t   *testing.T
	rdb *redis.Client
	rvScripts
	now int64 // µs
}

func newRV(t *testing.T, rdb *redis.Client, v rvVariant) *rv {
	return &rv{t: t, rdb: rdb, rvScripts: rvLoad(t, v)}
}

func (r *rv) clock(a []any) []any { return append(a, r.now/1e6, r.now%1e6) }

type rvReq struct {
	key  string
	q    Quota
	gran int64
	nb   int64
	n    int
}

type rvDec struct {
	code, at, rem int64
}

type rvReply struct {
	now   int64
	decs  [][]rvDec // per key
	hints []int64
}

// admit runs counter.lua for reqs as one batch.
func (r *rv) admit(reqs ...rvReq) (rvReply, error) {
	type qk struct {
		q    Quota
		gran int64
	}
	var qs []qk
	var keys []string
	var calls []any
	for _, rq := range reqs {
		i := slices.Index(qs, qk{rq.q, rq.gran})
		if i < 0 {
			i = len(qs)
			qs = append(qs, qk{rq.q, rq.gran})
		}
		keys = append(keys, rq.key)
		calls = append(calls, i+1, rq.nb, rq.n)
	}
	args := []any{len(qs)}
	for _, k := range qs {
		args = append(args, k.q.Limit, k.q.Window.Microseconds(), k.q.MaxDelay.Microseconds(), k.gran)
	}
	res, err := r.counter.Run(r.t.Context(), r.rdb, keys, r.clock(append(args, calls...))...).Int64Slice()
	if err != nil {
		return rvReply{}, err
	}
	out := rvReply{now: res[0]}
	p := 1
	for _, rq := range reqs {
		var ds []rvDec
		for range rq.n {
			ds = append(ds, rvDec{res[p], res[p+1], res[p+2]})
			p += 3
		}
		out.decs = append(out.decs, ds)
		out.hints = append(out.hints, res[p])
		p++
	}
	if p != len(res) {
		r.t.Fatalf("reply of %d numbers, read %d", len(res), p)
	}
	return out, nil
}

func (r *rv) admit1(key string, q Quota, gran int64, n int, nb int64) ([]rvDec, int64) {
	r.t.Helper()
	rep, err := r.admit(rvReq{key, q, gran, nb, n})
	if err != nil {
		r.t.Fatal(err)
	}
	return rep.decs[0], rep.hints[0]
}

func (r *rv) releaseAt(key string, at int64) int64 {
	r.t.Helper()
	res, err := r.release.Run(r.t.Context(), r.rdb, []string{key}, r.clock([]any{at})...).Int64Slice()
	if err != nil {
		r.t.Fatal(err)
	}
	return res[1]
}

func (r *rv) usageOf(key string, q Quota) []int64 {
	r.t.Helper()
	res, err := r.usage.Run(r.t.Context(), r.rdb, []string{key}, r.clock([]any{q.Limit, q.Window.Microseconds()})...).Int64Slice()
	if err != nil {
		r.t.Fatal(err)
	}
	return res
}

// read decodes key's window, if it has one.
func (r *rv) read(key string) (counterWindow, bool) {
	r.t.Helper()
	v, err := r.rdb.Get(r.t.Context(), key).Bytes()
	if err == redis.Nil {
		return counterWindow{}, false
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return decodeWindow(r.t, key, v), true
}

// check fails unless key's window is consistent: integral, non-negative,
// total the ring's sum.
func (r *rv) check(key, when string) counterWindow {
	r.t.Helper()
	w, ok := r.read(key)
	if !ok {
		return w
	}
	for i, x := range w.raw {
		if x != math.Floor(x) || x < 0 {
			r.t.Fatalf("%s: %s field %d is %v", when, key, i+1, x)
		}
	}
	var sum int64
	for _, c := range w.ring {
		sum += c
	}
	if sum != w.total {
		r.t.Fatalf("%s: %s ring sums to %v, total says %v (%v)", when, key, sum, w.total, w.raw)
	}
	return w
}

// rvStart is a clock far enough ahead of real time that PXAT from the
// fake clock never expires a key during a test.
const rvStart = int64(1_900_000_000_000_000)

// rvHist is the bound checker of TestBoundAcrossQuotaChanges: a decision
// under (L, W) at now drops slots <= now-W, then must find fewer than L
// slots in (t-W, t].
type rvHist struct {
	recorded map[int64]int64 // slot -> count
	newest   int64
}

func (h *rvHist) decide(t *testing.T, what string, q Quota, now, start int64, ds []rvDec) {
	t.Helper()
	if h.recorded == nil {
		h.recorded = map[int64]int64{}
	}
	cut := now - q.Window.Microseconds()
	for s := range h.recorded {
		if s <= cut {
			delete(h.recorded, s)
		}
	}
	rejected := false
	for _, d := range ds {
		if d.code == 2 {
			rejected = true
			continue
		}
		if rejected {
			t.Fatalf("%s: %v after a rejection", what, d)
		}
		if d.at < h.newest {
			t.Fatalf("%s: slot %d before the earlier slot %d (FIFO)", what, d.at, h.newest)
		}
		if d.at-start > q.MaxDelay.Microseconds() {
			t.Fatalf("%s: slot %d is %dµs past start %d, MaxDelay %v", what, d.at, d.at-start, start, q.MaxDelay)
		}
		var in int64
		for s, c := range h.recorded {
			if s > d.at-q.Window.Microseconds() && s <= d.at {
				in += c
			}
		}
		if in >= int64(q.Limit) {
			t.Fatalf("%s: quota %v gave %d (code %d), with %d slots already in (t-W, t]", what, q, d.at, d.code, in)
		}
		h.newest = d.at
		h.recorded[d.at]++
	}
}

// release gives back a slot at at. As in the log, the newest slot may
// then go back (the counter's does once nothing is left in any window from
// now): FIFO is checked against the slots still held.
func (h *rvHist) release(at int64) bool {
	if h.recorded[at] > 0 {
		h.recorded[at]--
		if h.recorded[at] == 0 {
			delete(h.recorded, at)
		}
		h.newest = 0
		for s := range h.recorded {
			h.newest = max(h.newest, s)
		}
		return true
	}
	return false
}

// TestCounterPathsAgree runs the same random traffic on three
// copies of the script (as is, without the header fast path, with the text
// codec) on one real redis-server, one key each, on the same exact clock:
// replies and decoded windows must agree, the windows stay consistent,
// and the bound, FIFO and MaxDelay hold.
func TestCounterPathsAgree(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	vs := []*rv{newRV(t, rdb, rvAsIs), newRV(t, rdb, rvNoFast), newRV(t, rdb, rvTextOnly)}
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			for _, v := range vs {
				v.t = t
			}
			quota := func() Quota {
				ws := []time.Duration{time.Second, time.Second + 5*time.Microsecond, 100 * time.Millisecond, 3 * time.Second, time.Millisecond + 9*time.Microsecond}
				return Quota{
					Limit:    []int{1 + r.IntN(8), 1 + r.IntN(60)}[r.IntN(2)],
					Window:   ws[r.IntN(len(ws))],
					MaxDelay: time.Duration(r.IntN(4000)) * time.Millisecond,
					Mode:     Counter,
				}
			}
			qs := []Quota{quota(), quota()}
			if r.IntN(3) == 0 {
				qs = qs[:1]
			}
			gran := []int64{1, 1, 1000, 250_000}[r.IntN(4)]
			keys := []string{fmt.Sprintf("{a%d}:cnt", seed), fmt.Sprintf("{n%d}:cnt", seed), fmt.Sprintf("{x%d}:cnt", seed)}
			now := rvStart + r.Int64N(1e6)
			var h rvHist
			mean := []float64{30_000, 3_000, 300, 200_000}[r.IntN(4)]
			var given []int64
			fastSeen := 0
			defer func() { t.Logf("header-only writes seen: %d", fastSeen) }()
			for step := range 400 {
				now += int64(r.ExpFloat64() * mean)
				for _, v := range vs {
					v.now = now
				}
				what := fmt.Sprintf("step %d now %d", step, now)
				if r.IntN(8) == 0 && len(given) > 0 {
					i := r.IntN(len(given))
					var got []int64
					for k, v := range vs {
						got = append(got, v.releaseAt(keys[k], given[i]))
					}
					if got[0] != got[1] || got[0] != got[2] {
						t.Fatalf("%s: release differs %v", what, got)
					}
					if got[0] == 1 {
						h.release(given[i])
					}
					given = append(given[:i], given[i+1:]...)
					continue
				}
				q := qs[r.IntN(len(qs))]
				var nb int64
				start := now
				if r.IntN(5) == 0 {
					nb = now + r.Int64N(2*q.Window.Microseconds())
					start = nb
				}
				n := 1 + r.IntN(4)
				var reps [][]rvDec
				var hints []int64
				for k, v := range vs {
					ds, hint := v.admit1(keys[k], q, gran, n, nb)
					reps = append(reps, ds)
					hints = append(hints, hint)
				}
				for k := 1; k < 3; k++ {
					if !slices.Equal(reps[0], reps[k]) || hints[0] != hints[k] {
						t.Fatalf("%s: variant %d replies %v hint %d, as-is %v hint %d", what, k, reps[k], hints[k], reps[0], hints[0])
					}
				}
				ws := make([]counterWindow, 3)
				for k, v := range vs {
					ws[k] = v.check(keys[k], what)
				}
				for k := 1; k < 3; k++ {
					if !slices.Equal(ws[0].raw[:7], ws[k].raw[:7]) || !slices.Equal(ws[0].ring, ws[k].ring) {
						t.Fatalf("%s: variant %d holds %v ring %v, as-is %v ring %v", what, k, ws[k].raw[:8], ws[k].ring, ws[0].raw[:8], ws[0].ring)
					}
				}
				if w := ws[0]; w.raw != nil && w.raw[8+w.top%(w.span+1)] != float64(w.count) {
					fastSeen++
				}
				h.decide(t, what, q, now, start, reps[0])
				if hint := hints[0]; hint > now+1 {
					// The hint says a request without a not-before time
					// is rejected until then: try one just before it, on
					// a copy.
					ctx := t.Context()
					v := vs[0]
					tmp := keys[0] + "tmp"
					v.rdb.Copy(ctx, keys[0], tmp, 0, true)
					v.rdb.Del(ctx, tmp+":o")
					v.rdb.Copy(ctx, keys[0]+":o", tmp+":o", 0, true)
					saved := v.now
					v.now = hint - 1
					ds, _ := v.admit1(tmp, q, gran, 1, 0)
					v.now = saved
					if ds[0].code != 2 {
						t.Fatalf("%s: hint %d (in %dµs), but a request at %d gets %v", what, hint, hint-now, hint-1, ds[0])
					}
				}
				for _, d := range reps[0] {
					if d.code != 2 {
						given = append(given, d.at)
					}
				}
			}
		})
	}
}

// --- Confirmed: Redis TIME going back ---------------------------------------

// TestCounterClockStepsBack: an admission at now records now as the
// tenant's newest slot, on every path (the header-only one on Redis
// included), so that when Redis's clock steps back (an NTP step, a
// failover to a replica whose clock is behind) the next slots still come
// after it and no window holds more than the limit.
func TestCounterClockStepsBack(t *testing.T) {
	q := Quota{Limit: 10, Window: time.Second, Mode: Counter}
	check := func(t *testing.T, slots []int64) {
		t.Helper()
		if got := maxInWindow(slices.Clone(slots), q.Window); got > q.Limit {
			t.Errorf("%d slots in one window of %v, limit %d: slots %v", got, q.Window, q.Limit, slots)
		}
		for i := 1; i < len(slots); i++ {
			if slots[i] < slots[i-1] {
				t.Errorf("slot %d handed out after slot %d (FIFO)", slots[i], slots[i-1])
				break
			}
		}
	}
	t.Run("redis-server", func(t *testing.T) {
		v := newRV(t, redistest.Start(t).Client(t), rvAsIs)
		const key = "{back}:cnt"
		v.now = rvStart + 500_000
		var slots []int64
		for range 2 { // the second call takes the header fast path
			ds, _ := v.admit1(key, q, 1, 4, 0)
			for _, d := range ds {
				if d.code == 0 {
					slots = append(slots, d.at)
				}
			}
		}
		if w := v.check(key, "after"); w.last != 0 {
			t.Logf("last = %v", w.last)
		} else {
			t.Logf("after 8 admissions at %d, the stored last is still %v", v.now, w.last)
		}
		v.now -= 300_000 // the clock steps back 300ms
		ds, _ := v.admit1(key, q, 1, 10, 0)
		for _, d := range ds {
			if d.code != 2 {
				slots = append(slots, d.at)
			}
		}
		check(t, slots)
	})
	t.Run("miniredis", func(t *testing.T) {
		mr, rdb := onMini(t)
		script := lua.Counter()
		t0 := time.Unix(1_780_000_000, 500_000_000)
		var slots []int64
		run := func(at time.Time, n int) {
			mr.SetTime(at)
			res, err := script.Run(t.Context(), rdb, []string{"{back}:cnt"}, counterArgs(q, 1, n, 0)...).Int64Slice()
			if err != nil {
				t.Fatal(err)
			}
			for j := range n {
				if res[1+3*j] != 2 {
					slots = append(slots, res[2+3*j])
				}
			}
		}
		run(t0, 9)
		run(t0.Add(-300*time.Millisecond), 10)
		check(t, slots)
	})
}

// TestCounterHugeQuotas: the largest Limit, Window and MaxDelay, far
// not-before times and hour granularity, with both codecs: no script
// error, the window stays consistent, and bound, FIFO and MaxDelay hold.
func TestCounterHugeQuotas(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	for vi, variant := range []rvVariant{rvAsIs, rvTextOnly} {
		v := newRV(t, rdb, variant)
		qs := []Quota{
			{Limit: MaxLimit, Window: MaxWindow, MaxDelay: MaxMaxDelay, Mode: Counter},
			{Limit: 1, Window: time.Millisecond, MaxDelay: MaxMaxDelay, Mode: Counter},
			{Limit: MaxLimit, Window: time.Millisecond, MaxDelay: MaxMaxDelay, Mode: Counter},
			{Limit: 3, Window: MaxWindow, MaxDelay: MaxMaxDelay, Mode: Counter},
		}
		for qi, q := range qs {
			key := fmt.Sprintf("{h%d.%d}:cnt", vi, qi)
			v.now = rvStart + 123_456
			var h rvHist
			for step := range 40 {
				v.now += int64(step) * 777_777
				nb := int64(0)
				if step%3 == 1 {
					nb = v.now + MaxMaxDelay.Microseconds()/2 + int64(step)
				}
				n := 1 + step%5
				ds, hint := v.admit1(key, q, []int64{1, 3_600_000_000}[step%2], n, nb)
				w := v.check(key, fmt.Sprint(step))
				h.decide(t, fmt.Sprintf("q%d step %d", qi, step), q, v.now, max(v.now, nb), ds)
				if step%7 == 0 {
					u := v.usageOf(key, q)
					t.Logf("q%d step %d: %v hint %d; usage %v; list %d; ttl %v; top %v last %v", qi, step, ds, hint, u, v.rdb.LLen(t.Context(), key+":o").Val(), v.rdb.PTTL(t.Context(), key).Val(), w.top, w.last)
				}
			}
		}
	}
}

// TestLogClockStepsBack is TestCounterClockStepsBack in Log mode, which
// counts the whole log.
func TestLogClockStepsBack(t *testing.T) {
	q := Quota{Limit: 10, Window: time.Second}
	g, mr, _ := clockedGate(t, q)
	t0 := time.Unix(1_780_000_000, 500_000_000)
	var slots []int64
	for i, at := range []time.Time{t0, t0.Add(-300 * time.Millisecond)} {
		mr.SetTime(at)
		var ids []string
		for j := range []int{9, 10}[i] {
			ids = append(ids, fmt.Sprint(i, "-", j))
		}
		ds, err := g.AdmitBatch(t.Context(), "c", ids)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Outcome != Rejected {
				slots = append(slots, d.At.UnixMicro())
			}
		}
	}
	if got := maxInWindow(slots, q.Window); got > q.Limit {
		t.Fatalf("log mode: %d in a window", got)
	}
}

// --- Confirmed: a released far-ahead slot keeps blocking the tenant ---------

// TestCounterReleaseOfAFarSlot: a request scheduled an hour ahead
// (AdmitAt) is deferred to its time and, by FIFO, every request after it
// waits behind it. Once that one slot is released and nothing is left in
// any window, the tenant is admitted again, in both modes: the log's
// newest goes back, and so does the counter's.
func TestCounterReleaseOfAFarSlot(t *testing.T) {
	for _, mode := range []Mode{Log, Counter} {
		t.Run(mode.String(), func(t *testing.T) {
			q := Quota{Limit: 5, Window: 10 * time.Second, MaxDelay: 5 * time.Second, Mode: mode}
			g, mr, _ := clockedGate(t, q)
			mr.ClockTTL(true)
			t0 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
			mr.SetTime(t0)
			ctx := t.Context()
			far, err := g.AdmitAt(ctx, "f", "far", t0.Add(time.Hour))
			if err != nil || far.Outcome != Deferred {
				t.Fatalf("AdmitAt an hour ahead: %+v, %v; want deferred", far, err)
			}
			if err := g.Release(ctx, far); err != nil {
				t.Fatal(err)
			}
			// A minute later: nothing was ever admitted near now, and the
			// only slot handed out was given back.
			mr.SetTime(t0.Add(time.Minute))
			d, err := g.Admit(ctx, "f")
			if err != nil {
				t.Fatal(err)
			}
			if d.Outcome != Admitted {
				t.Fatalf("a minute after releasing the only slot: %v (retry at %v, %v from now); want admitted: no slot lies in any window",
					d.Outcome, d.At, d.At.Sub(t0.Add(time.Minute)))
			}
		})
	}
}

// --- Confirmed (minor): Usage after a window change ------------------------

// TestCounterReshapeRandom: quota changes between very different windows,
// with backlogs of several windows, far not-before times, releases and
// batches that repeat the key under different quotas (checked against the
// same calls one by one on another key); both keys and their lists keep
// an expiry, the list's no later than the key's.
func TestCounterReshapeRandom(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	b, s := newRV(t, rdb, rvAsIs), newRV(t, rdb, rvAsIs)
	for seed := range uint64(16) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			b.t, s.t = t, t
			ws := []time.Duration{time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond, time.Second, time.Second + 5*time.Microsecond, 10 * time.Second}
			quota := func() Quota {
				w := ws[r.IntN(len(ws))]
				return Quota{
					Limit:    1 + r.IntN(12),
					Window:   w,
					MaxDelay: time.Duration(r.Float64() * 6 * float64(w)),
					Mode:     Counter,
				}
			}
			qs := []Quota{quota(), quota(), quota()}
			bk, sk := fmt.Sprintf("{rb%d}:cnt", seed), fmt.Sprintf("{rs%d}:cnt", seed)
			now := rvStart + r.Int64N(1e7)
			var h rvHist
			var given []int64
			for step := range 300 {
				now += int64(r.ExpFloat64() * float64(qs[0].Window.Microseconds()) / 4)
				b.now, s.now = now, now
				what := fmt.Sprintf("step %d now %d", step, now)
				if r.IntN(7) == 0 && len(given) > 0 {
					i := r.IntN(len(given))
					x, y := b.releaseAt(bk, given[i]), s.releaseAt(sk, given[i])
					if x != y {
						t.Fatalf("%s: release %d vs %d", what, x, y)
					}
					if x == 1 {
						h.release(given[i])
					}
					given = append(given[:i], given[i+1:]...)
					continue
				}
				var reqs []rvReq
				for range 1 + r.IntN(3) {
					q := qs[r.IntN(len(qs))]
					var nb int64
					if r.IntN(5) == 0 {
						nb = now + r.Int64N(3*q.Window.Microseconds())
					}
					reqs = append(reqs, rvReq{bk, q, 1, nb, 1 + r.IntN(4)})
				}
				rep, err := b.admit(reqs...)
				if err != nil {
					t.Fatal(err)
				}
				for j, rq := range reqs {
					ds, hint := s.admit1(sk, rq.q, rq.gran, rq.n, rq.nb)
					if !slices.Equal(ds, rep.decs[j]) || hint != rep.hints[j] {
						t.Fatalf("%s: batch part %d %v hint %d, alone %v hint %d", what, j, rep.decs[j], rep.hints[j], ds, hint)
					}
					h.decide(t, fmt.Sprintf("%s part %d", what, j), rq.q, now, max(now, rq.nb), ds)
					for _, d := range ds {
						if d.code != 2 {
							given = append(given, d.at)
						}
					}
				}
				wb, ws := b.check(bk, what), s.check(sk, what)
				for _, k := range []string{bk, sk} {
					ctx := t.Context()
					kt, lt := rdb.PExpireTime(ctx, k).Val(), rdb.PExpireTime(ctx, k+":o").Val()
					if kt <= 0 && rdb.Exists(ctx, k).Val() == 1 || lt == -1 || lt > kt && lt > 0 {
						t.Fatalf("%s: %s expires at %v, its list at %v", what, k, kt, lt)
					}
				}
				if !slices.Equal(wb.raw, ws.raw) {
					t.Fatalf("%s: batch key %v, single key %v", what, wb.raw, ws.raw)
				}
			}
		})
	}
}
