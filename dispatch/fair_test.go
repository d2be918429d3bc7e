package dispatch_test

import (
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
)

// generous admits everything at once: these tests are about shares, not
// the rate.
var generous = admission.Quota{Limit: 100_000, Window: time.Second}

func TestLoneTenantFillsThePool(t *testing.T) {
	s := newStack(t, generous)
	s.startWorker(8, true)
	ids := s.enqueue("solo", 200, 10*time.Millisecond)
	s.waitRuns(ids, 30*time.Second)
	if p := s.peakAll.Load(); p < 8 {
		t.Errorf("a lone tenant ran at most %d tasks at once on 8 workers; want the whole pool", p)
	}
}

func TestCapIsHardInAFairQueue(t *testing.T) {
	s := newStack(t, generous)
	capped := generous
	capped.MaxInFlight = 2
	s.setQuota("capped", capped)
	s.startWorker(8, true)
	ids := s.enqueue("capped", 40, 10*time.Millisecond)
	s.waitRuns(ids, 30*time.Second)
	if p := s.peak["capped"]; p != 2 {
		t.Errorf("capped at 2, the tenant ran at most %d at once; want exactly 2 (the cap, and busy)", p)
	}
}
