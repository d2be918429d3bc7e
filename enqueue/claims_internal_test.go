package enqueue

import (
	"context"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
)

// decision is a decision for ID x that took its slot, or one admitted on
// the slot of an earlier call.
func decision(took bool) admission.Decision {
	return admission.Decision{Tenant: "acme", ID: "x", Outcome: admission.Admitted, Existing: !took}
}

// TestClaims: the last call of a group gives the slot back, and only when
// one took it and none wrote; calls that join meanwhile wait for the
// release.
func TestClaims(t *testing.T) {
	bg := context.Background()
	tests := []struct {
		desc        string
		took, kept  [2]bool // of calls a and b, which leave in that order
		bFailed     bool    // b has no decision: its admission failed
		wantRelease bool
	}{
		{desc: "the taker leaves first, the other writes: kept", took: [2]bool{true, false}, kept: [2]bool{false, true}},
		{desc: "the taker writes: kept", took: [2]bool{true, false}, kept: [2]bool{true, false}},
		{desc: "neither writes: the last gives it back", took: [2]bool{true, false}, wantRelease: true},
		{desc: "the other's admission failed: it gives the taker's slot back", took: [2]bool{true, false}, bFailed: true, wantRelease: true},
		{desc: "neither took it: kept (an earlier call's)", took: [2]bool{false, false}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var cs claims
			a, _ := cs.join(bg, "acme", "x")
			b, _ := cs.join(bg, "acme", "x")
			if _, release := a.leave(decision(tc.took[0]), tc.kept[0]); release {
				t.Fatal("the first to leave must not give the slot back while another call is in flight")
			}
			db := decision(tc.took[1])
			if tc.bFailed {
				db = admission.Decision{}
			}
			slot, release := b.leave(db, tc.kept[1])
			if release != tc.wantRelease {
				t.Fatalf("last leave = %v, want %v", release, tc.wantRelease)
			}
			if release && slot != decision(true) {
				t.Errorf("last leave gives back %+v, want the taker's decision %+v", slot, decision(true))
			}
			if !tc.wantRelease {
				if len(cs.m) != 0 {
					t.Errorf("claims hold %v after every call left", cs.m)
				}
				return
			}
			joined := make(chan hold, 1)
			go func() { h, _ := cs.join(bg, "acme", "x"); joined <- h }()
			select {
			case <-joined:
				t.Fatal("a call joined while the slot was being given back")
			case <-time.After(20 * time.Millisecond):
			}
			ctx, cancel := context.WithCancel(bg)
			cancel()
			if _, err := cs.join(ctx, "acme", "x"); err == nil {
				t.Error("join with a done ctx during a release succeeded")
			}
			b.released()
			c := <-joined
			if c.c == b.c {
				t.Error("the call after the release joined the released group")
			}
			if _, release := c.leave(decision(true), false); !release {
				t.Error("a new group of one that took the slot and wrote nothing must give it back")
			}
			c.released()
			if len(cs.m) != 0 {
				t.Errorf("claims hold %v after every call left", cs.m)
			}
		})
	}
}
