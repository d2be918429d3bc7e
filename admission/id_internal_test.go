package admission

import (
	"math"
	"strconv"
	"testing"
)

// TestIDs checks that generated IDs are canonical decimals below 2^63 (the
// form Redis keeps in a listpack as an integer), distinct, owned by their
// generator and by no other, across the wrap at 2^63.
func TestIDs(t *testing.T) {
	for _, start := range []uint64{0, 12345, idMask - 2} { // the last wraps to 0
		g, other := &idGen{start: start}, &idGen{start: start + 1000}
		seen := map[string]bool{}
		for range 10 {
			id := g.next()
			v, err := strconv.ParseUint(id, 10, 63)
			if err != nil || strconv.FormatUint(v, 10) != id {
				t.Fatalf("start %d: ID %q is not a canonical decimal below 2^63 (%v)", start, id, err)
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
			strconv.FormatUint((start+11)&idMask, 10), // not made yet
			"0" + strconv.FormatUint((start+1)&idMask, 10),
			"+" + strconv.FormatUint((start+1)&idMask, 10),
			strconv.FormatUint(math.MaxUint64, 10), "", "x", "abc.1",
		} {
			if g.owns(id) {
				t.Errorf("start %d: the generator owns %q, which it did not make", start, id)
			}
		}
	}
}
