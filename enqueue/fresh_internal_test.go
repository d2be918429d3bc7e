package enqueue

import (
	"context"
	"testing"

	"github.com/admitq/admitq/internal/freshid"
)

// A call's context marks its own task's ID when it made it, and no other,
// whatever the context it was given says: an Enqueue of a caller's own ID
// inside an Enqueue whose ID was made (from a custom Quotas, say) is not
// fresh, nor is an ID that code reached from the call admits with its
// context, so the gate keeps their slots and their parks look for a retry.
func TestACallContextMarksOnlyItsOwnID(t *testing.T) {
	for _, c := range []struct {
		outer, made bool
	}{{false, false}, {false, true}, {true, false}, {true, true}} {
		ctx := context.Background()
		if c.outer {
			ctx = freshid.Mark(ctx, "outer", "own")
		}
		cc := callFor(ctx, prepared{id: "own", made: c.made})
		if got := freshid.Made(cc, "own"); got != c.made {
			t.Errorf("inside a marked context %v, a call that made its ID %v: its ID marked %v, want %v", c.outer, c.made, got, c.made)
		}
		for _, id := range []string{"outer", "other"} {
			if freshid.Made(cc, id) {
				t.Errorf("inside a marked context %v, a call that made its ID %v: %q marked, want only the call's own", c.outer, c.made, id)
			}
		}
	}
}
