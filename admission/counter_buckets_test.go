package admission

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// TestCounterBucketsHoldTheirSlots checks counter.lua's hash against the
// slots it handed out, on an exact clock, through random traffic with
// batches, deferrals, rejections, not-before times and releases:
//   - an admission's remaining is the limit less the entries of the
//     buckets of its window;
//   - every bucket a window from now on reaches holds exactly the entries
//     recorded in its time, less those released, in the ring or in the
//     list of buckets that left it;
//   - "w" is the width the buckets are named by and the span, and "ws" the sum of the
//     buckets of the window ending in bucket "wb", which decisions read
//     instead of the buckets;
//   - the hash stays small: a sweep starts once per window, so after a
//     recording call no bucket is older than two windows and a bucket.
func TestCounterBucketsHoldTheirSlots(t *testing.T) {
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, 17))
		q := Quota{
			Limit:    1 + r.IntN(40),
			Window:   time.Duration(10+r.IntN(990)) * time.Millisecond,
			MaxDelay: time.Duration(r.IntN(2000)) * time.Millisecond,
			Mode:     Counter,
		}
		t.Run(fmt.Sprintf("seed=%d/%v", seed, q), func(t *testing.T) {
			mr, rdb := onMini(t)
			ctx := context.Background()
			script, release := lua.Counter(), lua.CounterRelease()
			const key = "b:{t}:cnt"
			width := q.Window.Microseconds() / counterBuckets
			span := (q.Window.Microseconds() + width - 1) / width
			recorded := map[int64]int64{} // bucket -> entries recorded, less released
			var slots []int64             // recorded slots, for releases
			now := time.Unix(1_780_000_000, 0).Add(time.Duration(r.IntN(1e6)) * time.Microsecond)
			// From a fifth of the quota to over it: windows with room, which
			// decisions answer from the sum, and full ones, which they
			// answer from the buckets; gaps of a bucket, several and more
			// than a window.
			load := 0.2 + 1.3*r.Float64()
			for step := range 300 {
				now = now.Add(time.Duration(r.ExpFloat64() * float64(q.Window) / float64(q.Limit) / load))
				mr.SetTime(now)
				if len(slots) > 0 && r.IntN(6) == 0 {
					i := r.IntN(len(slots))
					at := slots[i]
					res, err := release.Run(ctx, rdb, []string{key}, at).Int64Slice()
					if err != nil {
						t.Fatal(err)
					}
					if res[1] == 1 {
						recorded[at/width]--
						slots = append(slots[:i], slots[i+1:]...)
					}
					continue
				}
				var nb int64
				if r.IntN(4) == 0 {
					nb = now.Add(time.Duration(r.Int64N(int64(q.Window)))).UnixMicro()
				}
				n := 1 + r.IntN(3)
				res, err := script.Run(ctx, rdb, []string{key}, counterArgs(q, 1, n, nb)...).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				any := false
				for j := range n {
					if code, at := res[1+3*j], res[2+3*j]; code == 0 || code == 1 {
						recorded[at/width]++
						slots = append(slots, at)
						any = true
						if code == 0 {
							var inWindow int64
							for i := at/width - span; i <= at/width; i++ {
								inWindow += recorded[i]
							}
							if got, want := res[3+3*j], max(0, int64(q.Limit)-inWindow); got != want {
								t.Fatalf("step %d: remaining %d after an admission, want %d: the window holds %d", step, got, want, inWindow)
							}
						}
					}
				}
				if !any {
					continue
				}
				w := readWindow(t, rdb, key)
				if w.width != width || w.span != span {
					t.Fatalf("step %d: a recording call left width %d and span %d, want %d and %d", step, w.width, w.span, width, span)
				}
				// Every bucket a window from now on reaches is in the ring
				// or, when it left the ring, in the list.
				cur := res[0] / width
				var total int64
				for i := w.top - span; i <= w.top; i++ {
					total += w.ring[i%(span+1)]
					if got := w.ring[i%(span+1)]; i >= cur-span && got != recorded[i] {
						t.Fatalf("step %d: bucket %d holds %d in the ring, want the %d recorded in it", step, i, got, recorded[i])
					}
				}
				if total != w.total {
					t.Fatalf("step %d: the ring holds %d, its total says %d", step, total, w.total)
				}
				for i := cur - span; i < w.top-span; i++ {
					if got := w.listed[i]; got != recorded[i] {
						t.Fatalf("step %d: bucket %d holds %d in the list, want the %d recorded in it", step, i, got, recorded[i])
					}
				}
				for i, c := range recorded {
					if i > w.top && c != 0 {
						t.Fatalf("step %d: bucket %d, after the ring's top %d, holds %d", step, i, w.top, c)
					}
				}
			}
		})
	}
}

// counterWindow is a Counter-mode window as counter.lua keeps it (see
// counter_prelude.lua), with bucket top's entries in the ring, and, read
// by readWindow, its list of buckets that left the ring, by bucket.
type counterWindow struct {
	width, span, last, top, x, gone, total, count int64
	ring                                          []int64
	raw                                           []float64 // the numbers as stored
	listed                                        map[int64]int64
}

// decodeWindow decodes key's value v: doubles packed little-endian (on
// Redis, with its struct library; a packed window always holds a NUL, in
// its width) or decimal text (on a Lua without struct, as miniredis's).
func decodeWindow(t *testing.T, key string, v []byte) counterWindow {
	t.Helper()
	var raw []float64
	if bytes.IndexByte(v, 0) >= 0 {
		if len(v)%8 != 0 {
			t.Fatalf("%s holds %d bytes, not doubles", key, len(v))
		}
		for i := 0; i < len(v); i += 8 {
			raw = append(raw, math.Float64frombits(binary.LittleEndian.Uint64(v[i:])))
		}
	} else {
		for f := range strings.FieldsSeq(string(v)) {
			x, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("%s holds %q: %v", key, v, err)
			}
			raw = append(raw, x)
		}
	}
	n := make([]int64, len(raw))
	for i, x := range raw {
		n[i] = int64(x)
	}
	if len(n) < 9 || int64(len(n)) != 8+n[1]+1 {
		t.Fatalf("%s holds %v: want 8 numbers and a ring of span+1", key, raw)
	}
	w := counterWindow{width: n[0], span: n[1], last: n[2], top: n[3], x: n[4], gone: n[5], total: n[6], count: n[7], ring: n[8:], raw: raw}
	w.ring[w.top%(w.span+1)] = w.count // the header holds bucket top's entries
	return w
}

// readWindow reads key's window and its list.
func readWindow(t *testing.T, rdb *redis.Client, key string) counterWindow {
	t.Helper()
	v, err := rdb.Get(t.Context(), key).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	w := decodeWindow(t, key, v)
	w.listed = map[int64]int64{}
	for _, e := range rdb.LRange(t.Context(), key+":o", 0, -1).Val() {
		var at, c int64
		if _, err := fmt.Sscanf(e, "%d %d", &at, &c); err != nil {
			t.Fatalf("%s:o holds %q: %v", key, e, err)
		}
		w.listed[at/w.width] += c
	}
	return w
}

// TestCounterSumAcrossSpans: windows of one bucket width can span
// different numbers of buckets (1s and 1.000005s both count in buckets of
// 100ms, over 10 and 11 of them). A window's sum kept by a call of one must
// not be taken for the other's: it would miss a bucket, or subtract one it
// never held, and admit past the limit (16 in a second against 10, when
// the sum did not say which span it covered).
func TestCounterSumAcrossSpans(t *testing.T) {
	mr, rdb := onMini(t)
	ctx := t.Context()
	script := lua.Counter()
	const key, w = "{sum}:cnt", 100_000 // µs, the width of both windows' buckets
	short := Quota{Limit: 10, Window: time.Second, Mode: Counter}
	long := Quota{Limit: 10, Window: time.Second + 5*time.Microsecond, Mode: Counter}
	var slots []int64
	run := func(at int64, q Quota, n int) {
		t.Helper()
		mr.SetTime(time.UnixMicro(at))
		res, err := script.Run(ctx, rdb, []string{key}, counterArgs(q, 1, n, 0)...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		for j := range n {
			if res[1+3*j] == 0 { // admitted
				slots = append(slots, res[2+3*j])
				if rem := res[3+3*j]; rem < 0 || rem > int64(q.Limit) {
					t.Fatalf("at %d: remaining %d, limit %d", at, rem, q.Limit)
				}
			}
		}
	}
	h := int64(1_780_000_000_000_000) / w // a bucket
	run((h-9)*w, short, 1)                // the sweep's clock starts
	run(h*w, short, 8)                    // 8 in bucket h
	run((h+2)*w, short, 1)                // a sweep, which keeps bucket h
	run((h+11)*w, short, 1)               // the sum of buckets h+1..h+11: 2
	run((h+12)*w, long, 7)                // bucket h is in this window's sum, not in the one kept
	run((h+12)*w+1, long, 8)              //
	run((h+12)*w+2, short, 5)             //
	for _, q := range []Quota{short, long} {
		if got := maxInWindow(slots, q.Window); got > q.Limit {
			t.Errorf("%d admissions in a window of %v, limit %d", got, q.Window, q.Limit)
		}
	}
}

// TestCounterWindowOnRedis runs counter.lua on a real redis-server, where
// the window is packed with Redis's struct library and an admission in the
// ring's newest bucket rewrites only the header (SETRANGE), which
// miniredis never does: random traffic at Redis's own clock, several calls
// to a bucket and gaps of several, with deferrals and not-before times.
// After each call the packed window must hold what the replies handed out
// (every bucket of the ring, its total, nothing after its top), and over
// the whole run no window holds more than the limit and slots never go back.
func TestCounterWindowOnRedis(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	script := lua.Counter()
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 29))
		q := Quota{
			Limit:    4 + r.IntN(20),
			Window:   time.Duration(10+r.IntN(30)) * time.Millisecond,
			MaxDelay: time.Duration(r.IntN(60)) * time.Millisecond,
			Mode:     Counter,
		}
		t.Run(fmt.Sprintf("seed=%d/%v", seed, q), func(t *testing.T) {
			key := fmt.Sprintf("real:{t%d}:cnt", seed)
			width := q.Window.Microseconds() / counterBuckets
			span := (q.Window.Microseconds() + width - 1) / width
			recorded := map[int64]int64{}
			var slots []int64
			var last int64
			for step := range 150 {
				n := 1 + r.IntN(3)
				// About three quarters of the limit, in bursts: a third of
				// the calls at once, in the same bucket as a rule.
				if r.IntN(3) > 0 {
					time.Sleep(time.Duration(r.ExpFloat64() * 2 * float64(q.Window) * float64(n) / float64(q.Limit)))
				}
				var nb int64
				if r.IntN(5) == 0 {
					nb = time.Now().Add(time.Duration(r.Int64N(int64(q.Window)))).UnixMicro()
				}
				res, err := script.Run(t.Context(), rdb, []string{key}, counterArgs(q, 1, n, nb)...).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				for j := range n {
					if code, at := res[1+3*j], res[2+3*j]; code == 0 || code == 1 {
						if at < last {
							t.Fatalf("step %d: slot %d before the earlier %d", step, at, last)
						}
						last = at
						recorded[at/width]++
						slots = append(slots, at)
					}
				}
				v, err := rdb.Get(t.Context(), key).Bytes()
				if errors.Is(err, redis.Nil) {
					continue
				} else if err != nil {
					t.Fatal(err)
				}
				w := decodeWindow(t, key, v)
				if w.width != width || w.span != span {
					t.Fatalf("step %d: width %d and span %d, want %d and %d", step, w.width, w.span, width, span)
				}
				var total int64
				for i := w.top - span; i <= w.top; i++ {
					total += w.ring[i%(span+1)]
					if got := w.ring[i%(span+1)]; got != recorded[i] {
						t.Fatalf("step %d: bucket %d holds %d, want the %d recorded in it", step, i, got, recorded[i])
					}
				}
				if total != w.total {
					t.Fatalf("step %d: the ring holds %d, its total says %d", step, total, w.total)
				}
				for i, c := range recorded {
					if i > w.top && c != 0 {
						t.Fatalf("step %d: bucket %d, after the ring's top %d, holds %d", step, i, w.top, c)
					}
				}
			}
			if got := maxInWindow(slots, q.Window); got > q.Limit {
				t.Fatalf("%d slots in one window, limit %d", got, q.Limit)
			}
		})
	}
	// The header-only path ran: it is what this test is for.
	if info := rdb.Info(t.Context(), "commandstats").Val(); !strings.Contains(info, "cmdstat_setrange:calls=") {
		t.Fatalf("no SETRANGE in INFO commandstats: the header-only path never ran\n%s", info)
	}
}
