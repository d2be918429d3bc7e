package enqueue

import (
	"context"
	"testing"

	"github.com/admitq/admitq/internal/freshid"
)

// A call's context says whether this call made its task's ID, whatever
// the context it was given says: an Enqueue of a caller's own ID inside
// an Enqueue whose ID was made (from a custom Quotas, say) is not fresh,
// so the gate keeps its slot and its park looks for a retry.
func TestACallContextMarksOnlyItsOwnID(t *testing.T) {
	for _, c := range []struct {
		outer, fresh, want bool
	}{{false, false, false}, {false, true, true}, {true, false, false}, {true, true, true}} {
		ctx := context.Background()
		if c.outer {
			ctx = freshid.Mark(ctx)
		}
		cc := &callContext{Context: ctx, fresh: c.fresh}
		if got := freshid.Marked(cc); got != c.want {
			t.Errorf("inside a marked context %v, a call whose ID it made %v: marked %v, want %v", c.outer, c.fresh, got, c.want)
		}
	}
}
