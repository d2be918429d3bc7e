package admission_test

import (
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
)

// TestAZeroGateAnswersWithAnError: a zero or nil Gate answers every call
// with an error, and never a decision that reads as admitted; Close is a
// no-op.
func TestAZeroGateAnswersWithAnError(t *testing.T) {
	ctx := t.Context()
	for name, g := range map[string]*admission.Gate{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			if d, err := g.Admit(ctx, "acme"); err == nil || d.Outcome == admission.Admitted {
				t.Errorf("Admit: %v, %v", d, err)
			}
			if _, err := g.AdmitAt(ctx, "acme", "x", time.Now()); err == nil {
				t.Error("AdmitAt: no error")
			}
			if res := g.AdmitBatches(ctx, []admission.Batch{{Tenant: "acme", IDs: []string{"x"}}}); res[0].Err == nil {
				t.Errorf("AdmitBatches: %+v", res[0])
			}
			if err := g.Release(ctx, admission.Decision{Tenant: "acme", ID: "x", Outcome: admission.Admitted}); err == nil {
				t.Error("Release: no error")
			}
			if _, err := g.Usage(ctx, "acme"); err == nil {
				t.Error("Usage: no error")
			}
			if res := g.UsageBatch(ctx, []string{"acme"}); res[0].Err == nil {
				t.Error("UsageBatch: no error")
			}
			if res := g.UsageTop(ctx, []string{"acme"}, 1); res[0].Err == nil {
				t.Error("UsageTop: no error")
			}
			if _, err := g.Quota(ctx, "acme"); err == nil {
				t.Error("Quota: no error")
			}
			if _, _, err := g.KeyQuota(ctx, "api"); err == nil {
				t.Error("KeyQuota: no error")
			}
			if err := g.ScanTenants(ctx, "*", func(string) error { return nil }); err == nil {
				t.Error("ScanTenants: no error")
			}
			if err := g.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			_, _, _, _ = g.Prefix(), g.Timeout(), g.Redis(), g.Granularity()
			if _, err := g.AtGranularity(time.Second).Admit(ctx, "acme"); err == nil {
				t.Error("AtGranularity's Admit: no error")
			}
		})
	}
}
