package admission_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestUsageBatch: UsageBatch gives, for every tenant and in order, what
// Usage gives, on one Redis and on a cluster, in Log and Counter mode,
// after the script cache was flushed, with an error of its own for a tenant
// that cannot be read.
func TestUsageBatch(t *testing.T) {
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t)
	for _, c := range []struct {
		desc  string
		rdb   redis.UniversalClient
		flush func(ctx context.Context) error
	}{
		{"one Redis", srv.Client(t), func(ctx context.Context) error { return srv.Client(t).ScriptFlush(ctx).Err() }},
		{"cluster", cl.Client(t), func(ctx context.Context) error {
			return cl.Client(t).ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() })
		}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			ctx := t.Context()
			logQ := admission.Quota{Limit: 2, Window: time.Minute, MaxDelay: time.Hour}
			ctrQ := admission.Quota{Limit: 3, Window: time.Minute, MaxDelay: time.Hour, Mode: admission.Counter}
			quotas := admission.StaticQuotas{Default: &logQ, Tenants: map[string]admission.Quota{
				"ctr":  ctrQ,
				"bad!": {Limit: 0, Window: time.Second},
			}}
			// A long timeout: the single Usage calls compared against must
			// not time out on a loaded machine.
			g := admission.New(c.rdb, quotas, admission.WithTimeout(10*time.Second))
			t.Cleanup(func() { g.Close() })
			var tenants []string
			for i := range 1200 { // three pipelines
				tenant := "t-" + strconv.Itoa(i)
				tenants = append(tenants, tenant)
				if n := i % 4; n > 0 {
					if _, err := g.AdmitBatch(ctx, tenant, []string{"a", "b", "c"}[:n]); err != nil {
						t.Fatal(err)
					}
				}
			}
			if _, err := g.AdmitBatch(ctx, "ctr", []string{"a", "b", "c", "d"}); err != nil {
				t.Fatal(err)
			}
			tenants = append(tenants, "ctr", "", "bad!", "t-3")
			if err := c.flush(ctx); err != nil {
				t.Fatal(err)
			}

			got := g.UsageBatch(ctx, tenants)
			if len(got) != len(tenants) {
				t.Fatalf("UsageBatch gave %d results for %d tenants", len(got), len(tenants))
			}
			for i, tenant := range tenants {
				r := got[i]
				want, werr := g.Usage(ctx, tenant)
				if werr != nil {
					if r.Err == nil || errors.Is(r.Err, admission.ErrInvalidTenant) != errors.Is(werr, admission.ErrInvalidTenant) ||
						errors.Is(r.Err, admission.ErrInvalidQuota) != errors.Is(werr, admission.ErrInvalidQuota) {
						t.Errorf("UsageBatch %q: err %v, want like Usage's %v", tenant, r.Err, werr)
					}
					continue
				}
				if r.Err != nil {
					t.Errorf("UsageBatch %q: %v", tenant, r.Err)
					continue
				}
				u := r.Usage
				if u.Tenant != tenant || u.Quota != want.Quota || u.InWindow != want.InWindow || u.Reserved != want.Reserved ||
					(want.NextFree.After(want.Now) && !u.NextFree.Equal(want.NextFree)) || u.Now.IsZero() {
					t.Errorf("UsageBatch %q = %+v, want %+v", tenant, u, want)
				}
			}
			if u := got[3].Usage; u.InWindow != 2 || u.Reserved != 1 {
				t.Errorf("t-3 = %+v, want 2 in the window and 1 ahead", u)
			}
			if u := got[1200].Usage; u.InWindow != 3 || u.Quota.Mode != admission.Counter {
				t.Errorf("ctr = %+v, want 3 counted in the window", u)
			}

			// UsageTop: the fullest first, by share of the limit, then
			// count; failures last.
			top := g.UsageTop(ctx, []string{"t-0", "t-1", "t-6", "ctr", "bad!", "t-3", "t-2", ""}, 3)
			var order []string
			for _, r := range top {
				order = append(order, r.Usage.Tenant)
			}
			// t-3 holds 3 of 2, ctr 3 of 3, t-6 and t-2 2 of 2 (t-6 named
			// first), t-1 1 of 2, t-0 none.
			if diff := cmp.Diff([]string{"t-3", "ctr", "t-6", "bad!", ""}, order); diff != "" {
				t.Errorf("UsageTop 3 (-want,+got):\n%s", diff)
			}
			if top[0].Err != nil || top[0].Usage.InWindow != 2 || top[0].Usage.Reserved != 1 || top[0].Usage.Now.IsZero() {
				t.Errorf("UsageTop t-3 = %+v, want its full usage", top[0])
			}
			if top[3].Err == nil || top[4].Err == nil {
				t.Errorf("UsageTop failures = %v, %v; want errors", top[3].Err, top[4].Err)
			}
			all := g.UsageTop(ctx, tenants, 0)
			if len(all) != len(tenants) {
				t.Errorf("UsageTop 0 gave %d of %d tenants", len(all), len(tenants))
			}

			none := admission.New(c.rdb, admission.StaticQuotas{})
			t.Cleanup(func() { none.Close() })
			if r := none.UsageBatch(ctx, []string{"x"}); !errors.Is(r[0].Err, admission.ErrNoQuota) {
				t.Errorf("UsageBatch of a tenant without a quota: %v, want ErrNoQuota", r[0].Err)
			}
		})
	}
}

// TestUsageBatchFailures: a Redis that does not answer fails each tenant
// with ErrUnavailable within about a second (a bulk read's round trips get
// a second at least), and the bulk timeout ends
// the whole read with an error that names it.
func TestUsageBatchFailures(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	q := admission.Quota{Limit: 2, Window: time.Minute}
	tenants := []string{"a", "b", "c"}

	g := admission.New(srv.Client(t), static(q), admission.WithTimeout(100*time.Millisecond))
	t.Cleanup(func() { g.Close() })
	if r := g.UsageBatch(ctx, tenants); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	srv.Pause()
	start := time.Now()
	res := g.UsageBatch(ctx, tenants)
	took := time.Since(start)
	srv.Resume()
	for i, r := range res {
		if !errors.Is(r.Err, admission.ErrUnavailable) {
			t.Errorf("%s with Redis paused: %v, want ErrUnavailable", tenants[i], r.Err)
		}
	}
	if took > 5*time.Second {
		t.Errorf("UsageBatch with Redis paused took %v, want about a second", took)
	}

	short := admission.New(srv.Client(t), static(q), admission.WithBulkTimeout(time.Nanosecond))
	t.Cleanup(func() { short.Close() })
	for i, r := range short.UsageBatch(ctx, tenants) {
		if !errors.Is(r.Err, context.DeadlineExceeded) || !strings.Contains(fmt.Sprint(r.Err), "bulk timeout") {
			t.Errorf("%s past the bulk timeout: %v, want a deadline error naming it", tenants[i], r.Err)
		}
	}
}

// TestUsageBatchReadsQuotasInBulk: over a RedisQuotas, UsageBatch reads
// the quotas it has not cached a thousand per round trip, not one each.
func TestUsageBatchReadsQuotasInBulk(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	store := admission.NewRedisQuotas(rdb)
	q := admission.Quota{Limit: 4, Window: time.Minute}
	fillQuotas(t, rdb, "admitq", 1500, q)
	if err := store.SetDefault(ctx, admission.Quota{Limit: 1, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	g := admission.New(rdb, store)
	t.Cleanup(func() { g.Close() })
	tenants := []string{"other"}
	for i := range 1500 {
		tenants = append(tenants, "tenant-"+strconv.Itoa(i))
	}
	before := hmgetCalls(t, rdb)
	res := g.UsageBatch(ctx, tenants)
	if n := hmgetCalls(t, rdb) - before; n != 2 {
		t.Errorf("UsageBatch of %d tenants sent %d HMGETs, want 2", len(tenants), n)
	}
	if r := res[0]; r.Err != nil || r.Usage.Quota.Limit != 1 {
		t.Errorf("other = %+v, want the default quota", r)
	}
	for _, r := range res[1:] {
		if r.Err != nil || r.Usage.Quota != q {
			t.Fatalf("%s = %+v, want its own quota %v", r.Usage.Tenant, r, q)
		}
	}
}

// hmgetCalls returns how many HMGETs Redis has served.
func hmgetCalls(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_hmget:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// TestScanTenants: ScanTenants finds the tenants that have a window in
// Redis, in Log and Counter mode, on the default quota or their own,
// filtered by a glob, on one Redis and on every master of a cluster; other
// prefixes and other keys are not tenants, even when the prefix holds glob
// characters.
func TestScanTenants(t *testing.T) {
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t)
	for _, c := range []struct {
		desc string
		rdb  redis.UniversalClient
	}{
		{"one Redis", srv.Client(t)},
		{"cluster", cl.Client(t)},
	} {
		t.Run(c.desc, func(t *testing.T) {
			ctx := t.Context()
			logQ := admission.Quota{Limit: 2, Window: time.Minute}
			ctrQ := admission.Quota{Limit: 2, Window: time.Minute, Mode: admission.Counter}
			quotas := admission.StaticQuotas{Default: &logQ, Tenants: map[string]admission.Quota{"a-ctr": ctrQ}}
			g := admission.New(c.rdb, quotas, admission.WithPrefix("p*x"))
			decoy := admission.New(c.rdb, quotas, admission.WithPrefix("pyx"))
			t.Cleanup(func() { g.Close(); decoy.Close() })
			var want []string
			for i := range 30 {
				want = append(want, "a-"+strconv.Itoa(i))
			}
			want = append(want, "a-ctr", "b}:log", "b-1")
			for _, tenant := range want {
				if _, err := g.Admit(ctx, tenant); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := decoy.Admit(ctx, "a-decoy"); err != nil {
				t.Fatal(err)
			}
			if err := c.rdb.Set(ctx, "p*x:{a-not}:other", "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			scan := func(pattern string) []string {
				t.Helper()
				var got []string
				if err := g.ScanTenants(ctx, pattern, func(tenant string) error {
					got = append(got, tenant)
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				slices.Sort(got)
				return slices.Compact(got)
			}
			slices.Sort(want)
			if diff := cmp.Diff(want, scan("")); diff != "" {
				t.Errorf("ScanTenants of every tenant (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"b-1", "b}:log"}, scan("b*")); diff != "" {
				t.Errorf("ScanTenants b* (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"a-ctr"}, scan("a-c*")); diff != "" {
				t.Errorf("ScanTenants a-c* (-want,+got):\n%s", diff)
			}
			stop := errors.New("stop")
			calls := 0
			err := g.ScanTenants(ctx, "", func(string) error { calls++; return stop })
			if err != stop || calls != 1 {
				t.Errorf("ScanTenants whose fn fails: %v after %d calls, want fn's error after 1", err, calls)
			}
		})
	}
}
