package admission

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestIDs checks both forms of generated IDs: for a log that stays a
// listpack, canonical decimals below 2^63 (which Redis keeps there as
// integers), across the wrap at 2^63; for a larger one, the base-36 string
// with the generator's prefix. Each is distinct and owned by its generator
// and by no other.
func TestIDs(t *testing.T) {
	for _, start := range []uint64{0, 12345, idMask - 2} { // the last wraps to 0
		g := &idGen{start: start, prefix: "g."}
		other := &idGen{start: start + 1000, prefix: "o."}
		seen := map[string]bool{}
		for i := range 20 {
			limit := listpackEntries
			if i%2 == 1 {
				limit = listpackEntries + 1
			}
			id := g.next(limit)
			if limit <= listpackEntries {
				v, err := strconv.ParseUint(id, 10, 63)
				if err != nil || strconv.FormatUint(v, 10) != id {
					t.Fatalf("start %d: ID %q for a listpack is not a canonical decimal below 2^63 (%v)", start, id, err)
				}
			} else if rest, ok := strings.CutPrefix(id, "g."); !ok || rest == "" {
				t.Fatalf("start %d: ID %q for a skiplist lacks the prefix", start, id)
			}
			if seen[id] {
				t.Fatalf("start %d: ID %q twice", start, id)
			}
			seen[id] = true
			if !g.owns(id) {
				t.Errorf("start %d: the generator does not own its ID %q", start, id)
			}
			if other.owns(id) {
				t.Errorf("start %d: another generator owns %q", start, id)
			}
		}
		for _, id := range []string{
			strconv.FormatUint(start, 10),             // the start itself: never made
			strconv.FormatUint((start+21)&idMask, 10), // not made yet
			"0" + strconv.FormatUint((start+1)&idMask, 10),
			"+" + strconv.FormatUint((start+1)&idMask, 10),
			strconv.FormatUint(math.MaxUint64, 10), "", "x", "abc.1", "o.1",
		} {
			if g.owns(id) {
				t.Errorf("start %d: the generator owns %q, which it did not make", start, id)
			}
		}
	}
}

// TestLogBound checks the bound that picks an ID's form: Limit slots a
// window over the window and MaxDelay ahead, and the entries that wait for
// a trim; anything that could pass Redis's listpack size is a skiplist,
// without overflowing on a MaxDelay many windows long.
func TestLogBound(t *testing.T) {
	for _, c := range []struct {
		q        Quota
		listpack bool
	}{
		{Quota{Limit: 100, Window: time.Second}, true},                                    // 108
		{Quota{Limit: 120, Window: time.Second}, true},                                    // 128
		{Quota{Limit: 121, Window: time.Second}, false},                                   // 129
		{Quota{Limit: 60, Window: time.Second, MaxDelay: time.Second}, true},              // 2 windows: 128
		{Quota{Limit: 60, Window: time.Second, MaxDelay: 1001 * time.Millisecond}, false}, // 3 windows
		{Quota{Limit: 100, Window: time.Second, MaxDelay: time.Minute}, false},
		{Quota{Limit: 1, Window: time.Microsecond, MaxDelay: 1000 * time.Hour}, false},
		{Quota{Limit: 1_000_000, Window: time.Hour}, false},
	} {
		if got := logBound(c.q) <= listpackEntries; got != c.listpack {
			t.Errorf("%+v: bound %d, a listpack %v; want %v", c.q, logBound(c.q), got, c.listpack)
		}
	}
}
