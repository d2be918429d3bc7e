package enqueue

import (
	"context"
	"testing"
	"time"
)

// TestClaims: the last call of a group gives the slot back, and only when
// one took it and none wrote; calls that join meanwhile wait for the
// release.
func TestClaims(t *testing.T) {
	bg := context.Background()
	tests := []struct {
		desc        string
		took, kept  [2]bool // of calls a and b, which leave in that order
		wantRelease bool
	}{
		{desc: "the taker leaves first, the other writes: kept", took: [2]bool{true, false}, kept: [2]bool{false, true}},
		{desc: "the taker writes: kept", took: [2]bool{true, false}, kept: [2]bool{true, false}},
		{desc: "neither writes: the last gives it back", took: [2]bool{true, false}, wantRelease: true},
		{desc: "neither took it: kept (an earlier call's)", took: [2]bool{false, false}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var cs claims
			a, _ := cs.join(bg, "acme", "x")
			b, _ := cs.join(bg, "acme", "x")
			if a.leave(tc.took[0], tc.kept[0]) {
				t.Fatal("the first to leave must not give the slot back while another call is in flight")
			}
			if got := b.leave(tc.took[1], tc.kept[1]); got != tc.wantRelease {
				t.Fatalf("last leave = %v, want %v", got, tc.wantRelease)
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
			if c.leave(true, false) != true {
				t.Error("a new group of one that took the slot and wrote nothing must give it back")
			}
			c.released()
			if len(cs.m) != 0 {
				t.Errorf("claims hold %v after every call left", cs.m)
			}
		})
	}
}
