package dashboard

import (
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
)

// After a cap is lowered the dashboard says the tenant is over it and
// draining, not "at cap" with a count that contradicts the quota.
func TestDepthSaysWhenOverALoweredCap(t *testing.T) {
	for _, c := range []struct {
		desc          string
		inFlight, cap int
		atCap, over   bool
	}{
		{"under its cap", 1, 2, false, false},
		{"at its cap", 2, 2, true, false},
		{"over a cap lowered from 3 to 1", 3, 1, true, true},
	} {
		u := admission.Usage{Quota: admission.Quota{Limit: 10, Window: time.Second, MaxInFlight: c.cap}}
		d := depthOf(u, dispatch.TenantStats{InFlight: c.inFlight}, time.Now())
		if d.AtCap != c.atCap || d.OverCap != c.over {
			t.Errorf("%s: at cap %v, over cap %v; want %v, %v", c.desc, d.AtCap, d.OverCap, c.atCap, c.over)
		}
	}
}
