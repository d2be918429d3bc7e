package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// fillQuotas writes n quotas, tenant-0 to tenant-(n-1), straight into the
// hash, a pipeline of HSETs at a time.
func fillQuotas(t *testing.T, rdb redis.UniversalClient, prefix string, n int, q admission.Quota) {
	t.Helper()
	v, err := q.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 5000
	for lo := 0; lo < n; lo += chunk {
		args := make([]any, 0, 2*chunk)
		for i := lo; i < min(n, lo+chunk); i++ {
			args = append(args, fmt.Sprintf("tenant-%d", i), v)
		}
		if err := rdb.HSet(t.Context(), prefix+":quotas", args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestListPagesPastTheCallTimeout: List reads a hash far larger than one
// call could within the per-call timeout, a page at a time, under the
// bulk timeout.
func TestListPagesPastTheCallTimeout(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	const n = 150_000
	q := admission.Quota{Limit: 5, Window: time.Minute}
	fillQuotas(t, rdb, "admitq", n, q)

	// One HGETALL of it took 0.6s here (2s under -race), far past the
	// default 250ms: List failed at about 300k quotas, and here at 150k.
	store := admission.NewRedisQuotas(rdb)
	start := time.Now()
	all, err := store.List(t.Context())
	if err != nil {
		t.Fatalf("List of %d quotas with the default per-call timeout: %v", n, err)
	}
	t.Logf("List of %d quotas took %v", n, time.Since(start).Round(time.Millisecond))
	if len(all.Tenants) != n || all.Default != nil {
		t.Fatalf("List = %d tenants, default %v; want %d and none", len(all.Tenants), all.Default, n)
	}
	if got := all.Tenants["tenant-123456"]; got != q {
		t.Fatalf("tenant-123456 = %+v, want %+v", got, q)
	}

	// Its own deadline ends it, with an error that says so: not Redis
	// "unavailable".
	short := admission.NewRedisQuotas(rdb, admission.WithBulkTimeout(5*time.Millisecond))
	_, err = short.List(t.Context())
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, admission.ErrUnavailable) ||
		!strings.Contains(err.Error(), "bulk timeout") {
		t.Fatalf("List past its bulk timeout: %v; want a deadline error naming the bulk timeout", err)
	}
	// The caller's context ends it too.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := store.List(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("List with a cancelled context: %v, want context.Canceled", err)
	}
}

// TestScanAndGetBatch: Scan gives the tenants whose names match, each once
// (the hash is not resized here), with an error for an entry that does not
// decode and never the default; GetBatch gives each tenant's own quota, in
// order, across several round trips.
func TestScanAndGetBatch(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	store := admission.NewRedisQuotas(rdb)
	q := admission.Quota{Limit: 5, Window: time.Minute}
	fillQuotas(t, rdb, "admitq", 2500, q)
	if err := store.SetDefault(ctx, admission.Quota{Limit: 1, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "admitq:quotas", "tenant-bad", "{not json").Err(); err != nil {
		t.Fatal(err)
	}

	got := map[string]string{}
	err := store.Scan(ctx, "tenant-1?", func(tenant string, q admission.Quota, err error) error {
		if _, dup := got[tenant]; dup {
			t.Errorf("Scan gave %q twice", tenant)
		}
		got[tenant] = fmt.Sprint(q, err)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 10; i < 20; i++ {
		want[fmt.Sprintf("tenant-%d", i)] = fmt.Sprint(q, nil)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Scan tenant-1? (-want,+got):\n%s", diff)
	}

	var bad error
	n := 0
	if err := store.Scan(ctx, "", func(tenant string, _ admission.Quota, err error) error {
		n++
		if tenant == "tenant-bad" {
			bad = err
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 2501 || !errors.Is(bad, admission.ErrInvalidQuota) || !strings.Contains(bad.Error(), "tenant-bad") {
		t.Errorf("Scan of everything: %d tenants, tenant-bad %v; want 2501 and an invalid quota naming it", n, bad)
	}
	stop := errors.New("stop")
	if err := store.Scan(ctx, "*", func(string, admission.Quota, error) error { return stop }); err != stop {
		t.Errorf("Scan whose fn fails = %v, want fn's error", err)
	}

	tenants := []string{"tenant-bad", "nobody"}
	for i := 0; i < 2500; i += 2 {
		tenants = append(tenants, fmt.Sprintf("tenant-%d", i))
	}
	res, err := store.GetBatch(ctx, tenants)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(tenants) {
		t.Fatalf("GetBatch gave %d results for %d tenants", len(res), len(tenants))
	}
	if !errors.Is(res[0].Err, admission.ErrInvalidQuota) || !errors.Is(res[1].Err, admission.ErrNoQuota) {
		t.Errorf("GetBatch tenant-bad, nobody = %v, %v; want ErrInvalidQuota, ErrNoQuota", res[0].Err, res[1].Err)
	}
	for i, r := range res[2:] {
		if r.Err != nil || r.Quota != q {
			t.Fatalf("GetBatch %s = %+v, want %+v", tenants[i+2], r, q)
		}
	}
	if _, err := store.GetBatch(ctx, []string{"ok", ""}); !errors.Is(err, admission.ErrInvalidTenant) {
		t.Errorf("GetBatch with an empty tenant = %v, want ErrInvalidTenant", err)
	}
}
