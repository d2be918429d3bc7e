package admission_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestOutcomeZeroValueIsNone: the zero Outcome, and so the zero
// Decision's, is none of the four, and prints as "none"; the four print
// their lower-case names.
func TestOutcomeZeroValueIsNone(t *testing.T) {
	t.Parallel()
	var zero admission.Decision
	for _, o := range []admission.Outcome{admission.Admitted, admission.Deferred, admission.Rejected, admission.Parked} {
		if zero.Outcome == o {
			t.Errorf("the zero Decision reads as %v", o)
		}
	}
	if zero.Outcome != admission.NoOutcome || zero.Outcome.String() != "none" {
		t.Errorf("zero Outcome = %v (%d), want NoOutcome, \"none\"", zero.Outcome, int(zero.Outcome))
	}
	for o, want := range map[admission.Outcome]string{
		admission.Admitted: "admitted", admission.Deferred: "deferred", admission.Rejected: "rejected", admission.Parked: "parked",
	} {
		if o.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(o), o.String(), want)
		}
	}
}

// failedCalls makes every kind of admission call on g for tenant, each
// expected to fail, and returns what each returned.
func failedCalls(ctx context.Context, g *admission.Gate, tenant string) map[string]struct {
	d   admission.Decision
	ds  []admission.Decision
	err error
} {
	type result = struct {
		d   admission.Decision
		ds  []admission.Decision
		err error
	}
	got := map[string]result{}
	d, err := g.Admit(ctx, tenant)
	got["Admit"] = result{d: d, err: err}
	d, err = g.AdmitID(ctx, tenant, "id-1")
	got["AdmitID"] = result{d: d, err: err}
	d, err = g.AdmitAt(ctx, tenant, "id-2", time.Now().Add(time.Minute))
	got["AdmitAt"] = result{d: d, err: err}
	ds, err := g.AdmitBatch(ctx, tenant, []string{"id-3", "id-4"})
	got["AdmitBatch"] = result{ds: ds, err: err}
	ds, err = g.AdmitBatchAt(ctx, tenant, []string{"id-5"}, time.Now().Add(time.Minute))
	got["AdmitBatchAt"] = result{ds: ds, err: err}
	return got
}

// checkFailed checks that every call failed with an error matching want,
// and that none returned a decision that reads as one of the outcomes:
// single calls return the zero Decision, batches none at all.
func checkFailed(t *testing.T, ctx context.Context, g *admission.Gate, tenant string, want func(error) bool) {
	t.Helper()
	for call, r := range failedCalls(ctx, g, tenant) {
		if r.err == nil || !want(r.err) {
			t.Errorf("%s = %v; want a failure", call, r.err)
		}
		if r.d.Outcome != admission.NoOutcome || r.d != (admission.Decision{}) {
			t.Errorf("%s failed (%v) with decision %+v (%v); want the zero Decision, outcome none", call, r.err, r.d, r.d.Outcome)
		}
		if r.ds != nil {
			t.Errorf("%s failed (%v) with decisions %+v; want none", call, r.err, r.ds)
		}
	}
}

// TestFailedCallNeverReadsAsAdmitted: with Redis down under FailClosed,
// and on bad input, every admission call returns an error and a Decision
// whose Outcome is none: a caller that forgets the error still does not
// run the work.
func TestFailedCallNeverReadsAsAdmitted(t *testing.T) {
	t.Parallel()
	q := admission.Quota{Limit: 5, Window: time.Minute, MaxDelay: time.Minute}

	srv := redistest.Start(t)
	rdb := srv.Client(t)
	g := admission.New(rdb, static(q), admission.WithTimeout(100*time.Millisecond))
	t.Cleanup(func() { g.Close() })
	if d, err := g.Admit(t.Context(), "acme"); err != nil || d.Outcome != admission.Admitted {
		t.Fatalf("Admit with Redis up = %+v, %v; want admitted", d, err)
	}
	srv.Kill()
	t.Run("Redis down, FailClosed", func(t *testing.T) {
		checkFailed(t, t.Context(), g, "acme", func(err error) bool { return errors.Is(err, admission.ErrUnavailable) })
		// Again, now that the breaker is open and answers without Redis.
		checkFailed(t, t.Context(), g, "acme", func(err error) bool { return errors.Is(err, admission.ErrUnavailable) })
	})

	live := redistest.Start(t).Client(t)
	for _, c := range []struct {
		desc   string
		quotas admission.Quotas
		tenant string
		want   error
	}{
		{"an invalid tenant", static(q), "bad\ntenant", admission.ErrInvalidTenant},
		{"no quota", admission.StaticQuotas{}, "acme", admission.ErrNoQuota},
		{"an invalid quota", static(admission.Quota{Limit: 0, Window: time.Minute}), "acme", admission.ErrInvalidQuota},
	} {
		t.Run(c.desc, func(t *testing.T) {
			g := admission.New(live, c.quotas)
			t.Cleanup(func() { g.Close() })
			checkFailed(t, t.Context(), g, c.tenant, func(err error) bool { return errors.Is(err, c.want) })
		})
	}
	t.Run("a cancelled context", func(t *testing.T) {
		g := admission.New(live, static(q))
		t.Cleanup(func() { g.Close() })
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		checkFailed(t, ctx, g, "acme", func(err error) bool { return errors.Is(err, context.Canceled) })
	})
	t.Run("a cancelled context, the answer cached", func(t *testing.T) {
		// A full window's rejections are answered from the gate's deny
		// cache, without Redis: a call already cancelled is not.
		full := admission.Quota{Limit: 1, Window: time.Minute}
		g := admission.New(live, static(full))
		t.Cleanup(func() { g.Close() })
		for range 2 {
			if _, err := g.Admit(t.Context(), "full"); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		checkFailed(t, ctx, g, "full", func(err error) bool { return errors.Is(err, context.Canceled) })
	})
}

// testClusterPlainClientMoved: a plain client pointed at one node of a
// cluster reaches only the slots that node serves. A tenant of another
// node gets Redis's MOVED error, wrapped with ErrClusterNode, never a
// decision that reads as admitted; CheckServer says so beforehand.
func testClusterPlainClientMoved(t *testing.T, c *redistest.Cluster) {
	q := admission.Quota{Limit: 5, Window: time.Minute, MaxDelay: time.Minute}
	cc := c.Client(t)
	node := redis.NewClient(&redis.Options{Addr: c.Addrs()[0]})
	t.Cleanup(func() { node.Close() })
	var elsewhere string
	for _, tenant := range tenantsOnEveryMaster(t, cc, 1) {
		m, err := cc.MasterForKey(t.Context(), "{"+tenant+"}")
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr != c.Addrs()[0] {
			elsewhere = tenant
			break
		}
	}
	if elsewhere == "" {
		t.Fatalf("no tenant found on a master other than %s", c.Addrs()[0])
	}
	for _, batching := range []bool{true, false} {
		g := admission.New(node, static(q), admission.WithPrefix("moved"), admission.WithBatching(batching))
		t.Cleanup(func() { g.Close() })
		checkFailed(t, t.Context(), g, elsewhere, func(err error) bool {
			return strings.Contains(err.Error(), "MOVED") && errors.Is(err, admission.ErrClusterNode) &&
				strings.Contains(err.Error(), "cluster client") && !errors.Is(err, admission.ErrUnavailable)
		})
	}
	if err := admission.CheckServer(t.Context(), node); !errors.Is(err, admission.ErrClusterNode) {
		t.Errorf("CheckServer on the plain client = %v; want ErrClusterNode", err)
	}
}
