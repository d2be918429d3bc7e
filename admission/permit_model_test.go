package admission

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/admitq/admitq/lua"
)

// TestPermitScriptMatchesModel holds permit.lua's copy of the slot rule
// (slot.lua) to slotModel, the model admit.lua is held to: with a cap it
// never reaches, every request of random batches at random times must get
// the model's outcome, slot and remaining (the model trims as admit.lua
// does, and so must slot.lua for remaining to match).
func TestPermitScriptMatchesModel(t *testing.T) {
	mr, rdb, _ := onMiniredis(t)
	script := lua.Permit()
	ctx := t.Context()
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 11))
		q := Quota{
			// Limits of 8 + 40 let the log hold entries that have left
			// the window between trims (slot.lua trims as admit.lua does).
			Limit:       []int{1 + r.IntN(6), 8 + r.IntN(40)}[r.IntN(2)],
			Window:      time.Duration(1+r.IntN(5)) * time.Second,
			MaxDelay:    time.Duration(r.IntN(4)) * time.Second,
			MaxInFlight: 1 << 30,
		}
		gran := []int64{1, 1000, 1_000_000}[r.IntN(3)]
		tenant := "m" + strconv.FormatUint(seed, 10)
		keys := []string{logKey("p", tenant), permitsKey("p", tenant), parkedKey("p", tenant), notBeforeKey("p", tenant)}
		now := time.Unix(1_780_000_000, 0).Add(time.Duration(r.IntN(1e6)) * time.Microsecond)
		m := &slotModel{log: map[string]int64{}}
		next := 0
		for step := range 50 {
			desc := fmt.Sprintf("seed %d step %d quota %v gran %dµs", seed, step, q, gran)
			if r.IntN(3) == 0 {
				now = now.Add(time.Duration(r.Int64N(int64(2 * q.Window))))
				continue
			}
			ids := make([]string, 1+r.IntN(4))
			args := []any{q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), gran, q.MaxInFlight, 10, 1_000_000, 0, len(ids)}
			for i := range ids {
				ids[i] = "id" + strconv.Itoa(next)
				next++
				args = append(args, ids[i], Ref{ID: ids[i], Queue: "q"}.member())
			}
			mr.SetTime(now)
			m.expire(t, rdb, keys[0], now.UnixMicro(), q.Window.Microseconds(), desc)
			res, err := script.Run(ctx, rdb, keys, args...).Int64Slice()
			if err != nil {
				t.Fatalf("%s: %v", desc, err)
			}
			var got []modelResult
			for i := 2; i+2 < len(res); i += 3 {
				got = append(got, modelResult{res[i], res[i+1], res[i+2]})
			}
			want := m.admitAt(now.UnixMicro(), 0, q, gran, ids)
			want = want[:len(want)-1] // permit.lua gives no retry hint
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%s: admit %v (-model,+permit.lua):\n%s", desc, ids, diff)
			}
		}
	}
}

// TestReleaseScriptMatchesModel parks a random backlog behind a cap of 1,
// some tasks with a not-before time of their own, and gives permits back
// at random times: each parked task must be granted in park order, at the
// slot the model gives a request with that not-before time and no
// MaxDelay, and no not-before time may be left behind.
func TestReleaseScriptMatchesModel(t *testing.T) {
	mr, rdb, _ := onMiniredis(t)
	permit, release := lua.Permit(), lua.Release()
	ctx := t.Context()
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 13))
		// Limits of 9 and up let the log hold entries that have left the
		// window between trims.
		q := Quota{Limit: []int{1 + r.IntN(4), 9 + r.IntN(20)}[r.IntN(2)], Window: time.Duration(1+r.IntN(3)) * time.Second, MaxDelay: time.Hour, MaxInFlight: 1}
		tenant := "r" + strconv.FormatUint(seed, 10)
		keys := []string{logKey("p", tenant), permitsKey("p", tenant), parkedKey("p", tenant), dueKey("p", tenant), notBeforeKey("p", tenant)}
		permitKeys := []string{keys[0], keys[1], keys[2], keys[4]}
		now := time.Unix(1_780_000_000, 0).Add(time.Duration(r.IntN(1e6)) * time.Microsecond)
		m := &slotModel{log: map[string]int64{}}
		n := 2 + r.IntN(12)
		mr.SetTime(now)
		// One call each, the first admitted and the rest parked, so that
		// each may have a not-before time of its own: none, one that will
		// have passed by its release, or one a few windows ahead.
		var refs []string
		nbs := make([]int64, n)
		for i := range n {
			ref := Ref{ID: "id" + strconv.Itoa(i), Queue: "q:" + strconv.Itoa(i%2)}
			refs = append(refs, ref.member())
			if i > 0 && r.IntN(2) == 0 {
				nbs[i] = now.UnixMicro() + r.Int64N(int64(3*q.Window/time.Microsecond))
			}
			args := []any{q.Limit, q.Window.Microseconds(), 0, 1, 1, 100, 1_000_000, nbs[i], 1, ref.ID, ref.member()}
			res, err := permit.Run(ctx, rdb, permitKeys, args...).Int64Slice()
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int64{true: 0, false: 5}[i == 0]; res[2] != want {
				t.Fatalf("seed %d: task %d: outcome %d, want %d", seed, i, res[2], want)
			}
		}
		m.admitAt(now.UnixMicro(), 0, q, 1, []string{"id0"}) // the one admitted
		held := refs[0]
		for i := 1; i < n; i++ {
			now = now.Add(time.Duration(r.Int64N(int64(q.Window))))
			mr.SetTime(now)
			res, err := release.Run(ctx, rdb, keys, q.Limit, q.Window.Microseconds(), 1, 1, 1_000_000, held, 10, "0", 0).Slice()
			if err != nil {
				t.Fatal(err)
			}
			d, err := parseDepth(tenant, res, false)
			if err != nil {
				t.Fatal(err)
			}
			desc := fmt.Sprintf("seed %d release %d quota %v not before %d", seed, i, q, nbs[i])
			if len(d.Grants) != 1 || d.Grants[0].Ref.member() != refs[i] {
				t.Fatalf("%s: grants %+v, want one for %s", desc, d.Grants, refs[i])
			}
			want := m.admitAt(now.UnixMicro(), nbs[i], Quota{Limit: q.Limit, Window: q.Window, MaxDelay: 1000 * time.Hour}, 1, []string{"id" + strconv.Itoa(i)})
			if got := d.Grants[0].At.UnixMicro(); got != want[0].At {
				t.Fatalf("%s: slot %d, model %d", desc, got, want[0].At)
			}
			if d.InFlight != 1 || d.Parked != n-1-i {
				t.Fatalf("%s: in flight %d, parked %d; want 1, %d", desc, d.InFlight, d.Parked, n-1-i)
			}
			held = refs[i]
		}
		if left, _ := mr.HKeys(keys[4]); len(left) > 0 {
			t.Fatalf("seed %d: not-before times left after every task was granted: %v", seed, left)
		}
	}
}

func TestRefMemberRoundTrips(t *testing.T) {
	for _, r := range []Ref{{ID: "a"}, {ID: "x:y", Queue: "q"}, {ID: "", Queue: "3:abc"}, {ID: "é", Queue: "12:"}} {
		got, err := parseRef(r.member())
		if err != nil || got != r {
			t.Errorf("parseRef(%q) = %+v, %v; want %+v", r.member(), got, err, r)
		}
	}
	for _, bad := range []string{"", "x", "5:ab", "-1:a"} {
		if _, err := parseRef(bad); err == nil {
			t.Errorf("parseRef(%q) succeeded", bad)
		}
	}
}
