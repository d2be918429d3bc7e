package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestPermitsTenantsTimesOutCleanly calls Permits.Tenants with a timeout
// short enough that most calls end before Redis answers: the read that
// goes on after the call has given up must not touch what the call
// returns (go test -race finds it if it does), and a call that succeeds
// lists every tenant.
func TestPermitsTenantsTimesOutCleanly(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	q := admission.Quota{Limit: 100, Window: time.Minute, MaxInFlight: 1}
	g := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithTimeout(50*time.Microsecond))
	if err := rdb.SAdd(context.Background(), "admitq:depth", "a", "b", "c").Err(); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for range 500 {
		ts, err := g.Permits().Tenants(context.Background())
		switch {
		case err != nil && ts != nil:
			t.Fatalf("Tenants failed (%v) and still listed %q", err, ts)
		case err != nil:
			failed++
		case len(ts) != 3:
			t.Fatalf("Tenants: %q, want a, b and c", ts)
		}
	}
	t.Logf("%d of 500 calls timed out", failed)
}
