package dispatch

import (
	"testing"

	"github.com/admitq/admitq/admission"
)

// TestRunsAreBatchesTheGateTakes: a run holds one tenant's picks with one
// not-before time, at most admission.MaxBatch of them, in order.
func TestRunsAreBatchesTheGateTakes(t *testing.T) {
	var picks []pick
	add := func(tenant string, n int, nb int64) {
		for range n {
			picks = append(picks, pick{tenant: tenant, entry: waitingEntry{notBefore: nb}})
		}
	}
	add("a", 2*admission.MaxBatch+1, 0)
	add("b", 2, 0)
	add("b", 1, 7)
	add("a", 1, 0)
	got := runs(picks)
	m := admission.MaxBatch
	want := [][2]int{{0, m}, {m, 2 * m}, {2 * m, 2*m + 1}, {2*m + 1, 2*m + 3}, {2*m + 3, 2*m + 4}, {2*m + 4, 2*m + 5}}
	if len(got) != len(want) {
		t.Fatalf("runs = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("runs = %v, want %v", got, want)
		}
	}
}
