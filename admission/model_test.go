package admission

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/lua"
)

// slotModel is the slot rule of DESIGN.md written plainly in Go: a map of
// entry ID to slot, sorted on demand. admit.lua must agree with it exactly.
type slotModel struct {
	log map[string]int64
}

// expire empties the model when the log at key has expired in Redis at
// now (µs), which it may do once it holds only entries that have left the
// window w (µs): an untrimmed log may still count them. It fails t if the
// log expired holding an entry in the window.
func (m *slotModel) expire(t *testing.T, rdb *redis.Client, key string, now, w int64, desc string) {
	t.Helper()
	n, err := rdb.Exists(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 {
		return
	}
	for id, s := range m.log {
		if s > now-w {
			t.Fatalf("%s: the log expired holding %s at %d, in the window", desc, id, s)
		}
	}
	clear(m.log)
}

type modelResult struct {
	Code, At, Remaining int64
}

// admitAt decides ids, and returns their results followed by the retry
// hint as a last modelResult{Code: hint}, for work that starts no earlier than nb (µs, 0 for
// none): slot = max(start, newest, e + W) with start = max(now, nb), and
// MaxDelay counted from start. The retry hint speaks of requests without a
// not-before time.
func (m *slotModel) admitAt(now, nb int64, q Quota, gran int64, ids []string) []modelResult {
	w, d, limit := q.Window.Microseconds(), q.MaxDelay.Microseconds(), q.Limit
	start := max(now, nb)
	// admit.lua trims once every trimEvery entries, or near the limit.
	if card := len(m.log); card%trimEvery+len(ids) >= trimEvery || card+len(ids)+trimEvery > limit {
		for id, s := range m.log {
			if s <= now-w {
				delete(m.log, id)
			}
		}
	}
	newest := now
	for _, s := range m.log {
		newest = max(newest, s)
	}
	var out []modelResult
	var retryAt *int64
	for _, id := range ids {
		existing, has := m.log[id]
		var code, slot, raw int64
		switch {
		case retryAt != nil:
			code, slot = 2, *retryAt
		default:
			slot = max(newest, start)
			if len(m.log) >= limit {
				scores := slices.Sorted(mapValues(m.log))
				slot = max(slot, scores[len(scores)-limit]+w)
			}
			switch {
			case slot <= now:
				code = 0
			case ceil(slot, gran)-start <= d:
				code, slot = 1, ceil(slot, gran)
			default:
				code, raw, slot = 2, slot, ceil(slot, gran)
			}
		}
		switch {
		case has:
			code, slot = 3, existing
			if slot > now {
				code = 4
			}
		case code == 2:
			if retryAt == nil {
				slot = min(raw, slot-d)
				retryAt = &slot
			}
		default:
			m.log[id] = slot
			newest = slot
		}
		var remaining int64
		if code != 2 && newest <= now && len(m.log) < limit {
			remaining = int64(limit - len(m.log))
		}
		out = append(out, modelResult{code, slot, remaining})
	}
	var hint int64
	if retryAt != nil {
		hint = *retryAt
	} else {
		free := newest
		if len(m.log) >= limit {
			scores := slices.Sorted(mapValues(m.log))
			free = max(free, scores[len(scores)-limit]+w)
		}
		if free > now && ceil(free, gran)-now > d {
			hint = min(free, ceil(free, gran)-d)
		}
	}
	return append(out, modelResult{Code: hint})
}

// appendAdmitArgsAt appends admit.lua's ARGV for one key, as the committer
// sends it: one quota, then the key's quota index, not-before time nb µs
// (0 for none), count and IDs.
func appendAdmitArgsAt(args []any, q Quota, gran, nb int64, ids []string) []any {
	args = append(args, 1, q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), gran, 1, nb, len(ids))
	for _, id := range ids {
		args = append(args, id)
	}
	return args
}

func ceil(x, g int64) int64 { return (x + g - 1) / g * g }

func mapValues(m map[string]int64) func(func(int64) bool) {
	return func(yield func(int64) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// onMiniredis returns a miniredis, whose clock the test sets, a client of
// it and admit.lua.
func onMiniredis(t *testing.T) (*miniredis.Miniredis, *redis.Client, *redis.Script) {
	mr, rdb := onMini(t)
	rdb.AddHook(lua.FlagFallback()) // miniredis does not know script flags
	// Expiry follows SetTime, as in Redis: admit.lua reads it back.
	mr.ClockTTL(true)
	return mr, rdb, lua.Admit()
}

// pickIDs returns n entry IDs, each new (and then added to issued) or, one
// time in four, one issued before; runs of one ID are kept once.
func pickIDs(r *rand.Rand, n int, issued *[]string) []string {
	ids := make([]string, n)
	for i := range ids {
		if len(*issued) > 0 && r.IntN(4) == 0 {
			ids[i] = (*issued)[r.IntN(len(*issued))]
		} else {
			ids[i] = "id" + strconv.Itoa(len(*issued))
			*issued = append(*issued, ids[i])
		}
	}
	return slices.Compact(ids)
}

// TestScriptMatchesModel drives admit.lua on miniredis with an exact clock
// through random sequences of admissions (new and repeated IDs, batches,
// some with a not-before time, past or ahead), releases and time steps, and
// checks every reply and the stored log against slotModel.
func TestScriptMatchesModel(t *testing.T) {
	mr, rdb, script := onMiniredis(t)
	ctx := t.Context()

	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		// Small limits make every call trim and defer; larger ones leave
		// entries that left the window in the log between trims.
		q := Quota{
			Limit:    []int{1 + r.IntN(6), 12 + r.IntN(30)}[r.IntN(2)],
			Window:   time.Duration(1+r.IntN(5)) * time.Second,
			MaxDelay: time.Duration(r.IntN(4)) * time.Second,
		}
		gran := []int64{1, 1, 1000, 1_000_000}[r.IntN(4)]
		key := "model:{" + strconv.FormatUint(seed, 10) + "}:log"
		now := time.Unix(1_780_000_000, 0).Add(time.Duration(r.IntN(1e6)) * time.Microsecond)
		m := &slotModel{log: map[string]int64{}}
		var issued []string
		for step := range 60 {
			desc := fmt.Sprintf("seed %d step %d quota %v gran %dµs", seed, step, q, gran)
			switch op := r.IntN(10); {
			case op < 3: // time passes, sometimes past whole windows
				now = now.Add(time.Duration(r.Int64N(int64(2 * q.Window))))
			case op < 4 && len(issued) > 0: // release
				id := issued[r.IntN(len(issued))]
				delete(m.log, id)
				if err := rdb.ZRem(ctx, key, id).Err(); err != nil {
					t.Fatal(err)
				}
			default: // a batch of new and repeated IDs
				ids := pickIDs(r, 1+r.IntN(4), &issued)
				var nb int64 // one batch in three starts from -W to 3W away
				if r.IntN(3) == 0 {
					nb = now.UnixMicro() + r.Int64N(4*q.Window.Microseconds()) - q.Window.Microseconds()
				}
				mr.SetTime(now)
				m.expire(t, rdb, key, now.UnixMicro(), q.Window.Microseconds(), desc)
				args := appendAdmitArgsAt(nil, q, gran, nb, ids)
				res, err := script.Run(ctx, rdb, []string{key}, args...).Int64Slice()
				if err != nil {
					t.Fatalf("%s: %v", desc, err)
				}
				if res[0] != now.UnixMicro() {
					t.Fatalf("%s: script now = %d, want %d", desc, res[0], now.UnixMicro())
				}
				var got []modelResult
				for i := 1; i+2 < len(res); i += 3 {
					got = append(got, modelResult{res[i], res[i+1], res[i+2]})
				}
				got = append(got, modelResult{Code: res[len(res)-1]})
				want := m.admitAt(now.UnixMicro(), nb, q, gran, ids)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("%s: admit %v not before %d (-model,+script):\n%s", desc, ids, nb, diff)
				}
			}
			// The model trims when it decides, like the script: compare
			// what is live.
			checkLog(t, desc, rdb, key, m, now.UnixMicro()-q.Window.Microseconds())
		}
	}
}

// TestScriptMatchesModelAcrossGroups drives admit.lua with calls that
// carry one tenant's log in two or three groups, under two quotas and
// several granularities, as a batch does while a quota changes or gates
// of different granularities share a tenant. The script must decide the
// groups as the model decides them one after the other, at one time.
//
// Keys do not expire here: a log's expiry follows the window of the group
// that wrote it last, and the model has none. But admit.lua reads its
// expiry back (its parity says whether a slot lies ahead), so each step
// carries the absolute expiry over to the new clock, parity kept.
func TestScriptMatchesModelAcrossGroups(t *testing.T) {
	mr, rdb, script := onMiniredis(t)
	mr.ClockTTL(false)
	ctx := t.Context()
	var expiry map[string]int64 // each key's PEXPIRETIME right after its last call
	pin := func(now time.Time) {
		ms := now.UnixMilli()
		for key, e := range expiry {
			if e <= ms {
				e += (ms-e)/2*2 + 2
			}
			if err := rdb.PExpireAt(ctx, key, time.UnixMilli(e)).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}

	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 11))
		quota := func() Quota {
			return Quota{
				Limit:    1 + r.IntN(4),
				Window:   time.Duration(1+r.IntN(5)) * time.Second,
				MaxDelay: time.Duration(r.IntN(4)) * time.Second,
			}
		}
		qs := []Quota{quota(), quota()}
		if r.IntN(2) == 0 {
			qs[1].Limit = qs[0].Limit // same limit, another window: the case a cache keyed on the limit misses
		}
		grans := []int64{1, 1000, 1_000_000}
		key := "groups:{" + strconv.FormatUint(seed, 10) + "}:log"
		now := time.Unix(1_780_000_000, 0).Add(time.Duration(r.IntN(1e6)) * time.Microsecond)
		m := &slotModel{log: map[string]int64{}}
		var issued []string
		for step := range 40 {
			desc := fmt.Sprintf("seed %d step %d quotas %v", seed, step, qs)
			switch op := r.IntN(10); {
			case op < 3:
				now = now.Add(time.Duration(r.Int64N(int64(2 * qs[0].Window))))
			case op < 4 && len(issued) > 0:
				id := issued[r.IntN(len(issued))]
				delete(m.log, id)
				if err := rdb.ZRem(ctx, key, id).Err(); err != nil {
					t.Fatal(err)
				}
			default:
				type grp struct {
					q    Quota
					gran int64
					nb   int64
					ids  []string
				}
				groups := make([]grp, 2+r.IntN(2))
				for gi := range groups {
					groups[gi] = grp{qs[r.IntN(2)], grans[r.IntN(len(grans))], 0, pickIDs(r, 1+r.IntN(3), &issued)}
					if r.IntN(3) == 0 {
						groups[gi].nb = now.UnixMicro() + r.Int64N(3*groups[gi].q.Window.Microseconds())
					}
				}
				// The ARGV the committer sends: each (quota, granularity)
				// once, then every group's index, count and IDs.
				type qk struct {
					q    Quota
					gran int64
				}
				var table []qk
				var rest []any
				keys := make([]string, len(groups))
				for gi, g := range groups {
					i := slices.Index(table, qk{g.q, g.gran})
					if i < 0 {
						i = len(table)
						table = append(table, qk{g.q, g.gran})
					}
					keys[gi] = key
					rest = append(rest, i+1, g.nb, len(g.ids))
					for _, id := range g.ids {
						rest = append(rest, id)
					}
				}
				args := []any{len(table)}
				for _, k := range table {
					args = append(args, k.q.Limit, k.q.Window.Microseconds(), k.q.MaxDelay.Microseconds(), k.gran)
				}
				args = append(args, rest...)
				mr.SetTime(now)
				pin(now)
				res, err := script.Run(ctx, rdb, keys, args...).Int64Slice()
				if err != nil {
					t.Fatalf("%s: %v", desc, err)
				}
				expiry = map[string]int64{}
				if e := rdb.PExpireTime(ctx, key).Val(); e > 0 {
					expiry[key] = e.Milliseconds()
				}
				var got, want []modelResult
				off := 1
				for _, g := range groups {
					for range g.ids {
						got = append(got, modelResult{res[off], res[off+1], res[off+2]})
						off += 3
					}
					got = append(got, modelResult{Code: res[off]})
					off++
					want = append(want, m.admitAt(now.UnixMicro(), g.nb, g.q, g.gran, g.ids)...)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("%s: groups %v (-model,+script):\n%s", desc, groups, diff)
				}
			}
			checkLog(t, desc, rdb, key, m, now.UnixMicro()-max(qs[0].Window, qs[1].Window).Microseconds())
		}
	}
}

// TestAdmitArgs: admit.lua's ARGV as the committer builds it lists each
// (quota, granularity) once, whether it searched for them (up to eight)
// or mapped them (past eight), and every group's index points at its own.
func TestAdmitArgs(t *testing.T) {
	c := &committer{}
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		nq := 1 + r.IntN(40)
		var call []*group
		for j := range 1 + r.IntN(256) {
			qi := r.IntN(nq)
			call = append(call, &group{key: "k", q: Quota{Limit: 1 + qi, Window: time.Second}, gran: int64(1 + qi%3), nb: int64(j % 3), ids: []string{"x" + strconv.Itoa(j)}})
		}
		args := c.appendAdmitArgs(nil, call, true)
		n := args[0].(int)
		a := 1 + 4*n
		for j, g := range call {
			idx := args[a].(int)
			q := args[1+4*(idx-1):]
			if q[0].(int) != g.q.Limit || q[3].(int64) != g.gran {
				t.Fatalf("trial %d group %d: index %d points at %v, want limit %d gran %d", trial, j, idx, q[:4], g.q.Limit, g.gran)
			}
			if args[a+1].(int64) != g.nb || args[a+2].(int) != len(g.ids) || args[a+3].(string) != g.ids[0] {
				t.Fatalf("trial %d group %d: not-before, count and ID %v, want %d, 1 and %s", trial, j, args[a+1:a+4], g.nb, g.ids[0])
			}
			a += 3 + len(g.ids)
		}
		if a != len(args) {
			t.Fatalf("trial %d: %d arguments, walked %d", trial, len(args), a)
		}
		seen := map[[2]int64]bool{}
		for i := range n {
			k := [2]int64{int64(args[1+4*i].(int)), args[4+4*i].(int64)}
			if seen[k] {
				t.Fatalf("trial %d: quota %v listed twice", trial, k)
			}
			seen[k] = true
		}
	}
}
