package admission_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestValidateKey: key names follow the tenants' rules, with their own
// sentinel.
func TestValidateKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		key string
		ok  bool
	}{
		{"api:stripe", true}, {"ü", true}, {strings.Repeat("k", admission.MaxKeyLen), true},
		{"", false}, {strings.Repeat("k", admission.MaxKeyLen+1), false}, {"a\xffb", false}, {"a\nb", false}, {"\u0085", false},
	} {
		err := admission.ValidateKey(c.key)
		switch {
		case c.ok && err != nil:
			t.Errorf("ValidateKey(%q) = %v, want nil", c.key, err)
		case !c.ok && (!errors.Is(err, admission.ErrInvalidKey) || errors.Is(err, admission.ErrInvalidTenant)):
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey (not ErrInvalidTenant)", c.key, err)
		}
	}
}

// TestValidateAsKey: a key's quota caps and pauses, nothing else; it
// names the field that is set.
func TestValidateAsKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		desc  string
		q     admission.Quota
		field string // "" for valid
	}{
		{"a cap", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 3}, ""},
		{"paused", admission.Quota{Limit: admission.NoLimit, Paused: true}, ""},
		{"nothing", admission.Quota{Limit: admission.NoLimit}, ""},
		{"a rate limit", admission.Quota{Limit: 10, Window: time.Second, MaxInFlight: 3}, "Limit"},
		{"the zero Quota", admission.Quota{}, "Limit"},
		{"a window", admission.Quota{Limit: admission.NoLimit, Window: time.Second}, "Window"},
		{"a max delay", admission.Quota{Limit: admission.NoLimit, MaxDelay: time.Second}, "MaxDelay"},
		{"counter mode", admission.Quota{Limit: admission.NoLimit, Mode: admission.Counter}, "Mode"},
		{"a parked bound", admission.Quota{Limit: admission.NoLimit, MaxParked: 5}, "MaxParked"},
		{"a weight", admission.Quota{Limit: admission.NoLimit, Weight: 2}, "Weight"},
		{"a negative cap", admission.Quota{Limit: admission.NoLimit, MaxInFlight: -1}, "MaxInFlight"},
	} {
		err := c.q.ValidateAsKey()
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: ValidateAsKey(%+v) = %v, want nil", c.desc, c.q, err)
		case c.field != "" && (!errors.Is(err, admission.ErrInvalidQuota) || !strings.Contains(err.Error(), c.field)):
			t.Errorf("%s: ValidateAsKey(%+v) = %v, want ErrInvalidQuota naming %s", c.desc, c.q, err, c.field)
		}
	}
}

// TestRedisQuotasKeys: key quotas round-trip through SetKey, GetKey and
// ListKeys, in a hash apart from the tenants' (a key may share a tenant's
// name); DeleteKey removes one. Bad input gets a clear error and writes
// nothing; a bad entry written by hand is named on read.
func TestRedisQuotasKeys(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	ctx := t.Context()
	rq := admission.NewRedisQuotas(rdb, admission.WithPrefix("kq"))

	for _, c := range []struct {
		desc string
		call func() error
		want error
	}{
		{"an empty key", func() error { return rq.SetKey(ctx, "", admission.Quota{Limit: admission.NoLimit}) }, admission.ErrInvalidKey},
		{"a key with a newline", func() error {
			return rq.SetKey(ctx, "a\nb", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
		}, admission.ErrInvalidKey},
		{"a key quota with a rate limit", func() error {
			return rq.SetKey(ctx, "api", admission.Quota{Limit: 5, Window: time.Second})
		}, admission.ErrInvalidQuota},
		{"an invalid key quota", func() error {
			return rq.SetKey(ctx, "api", admission.Quota{Limit: admission.NoLimit, MaxInFlight: -1})
		}, admission.ErrInvalidQuota},
		{"delete a bad key", func() error { return rq.DeleteKey(ctx, "\x00") }, admission.ErrInvalidKey},
		{"get a bad key", func() error { _, err := rq.GetKey(ctx, ""); return err }, admission.ErrInvalidKey},
		{"get a missing key", func() error { _, err := rq.GetKey(ctx, "nobody"); return err }, admission.ErrNoQuota},
	} {
		if err := c.call(); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.desc, err, c.want)
		}
		if keys := rdb.Keys(ctx, "kq*").Val(); len(keys) != 0 {
			t.Fatalf("%s: wrote %v", c.desc, keys)
		}
	}

	want := map[string]admission.Quota{
		"api:stripe": {Limit: admission.NoLimit, MaxInFlight: 3},
		"db:reports": {Limit: admission.NoLimit, Paused: true},
		"acme":       {Limit: admission.NoLimit, MaxInFlight: 1, Paused: true}, // also a tenant's name
	}
	tenant := admission.Quota{Limit: 7, Window: time.Minute}
	if err := rq.Set(ctx, "acme", tenant); err != nil {
		t.Fatal(err)
	}
	for key, q := range want {
		if err := rq.SetKey(ctx, key, q); err != nil {
			t.Fatalf("SetKey(%q, %+v): %v", key, q, err)
		}
		if got, err := rq.GetKey(ctx, key); err != nil || got != q {
			t.Errorf("GetKey(%q) = %+v, %v; want %+v", key, got, err, q)
		}
	}
	got, err := rq.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListKeys (-want,+got):\n%s", diff)
	}
	if q, err := rq.Get(ctx, "acme"); err != nil || q != tenant {
		t.Errorf("tenant acme's quota = %+v, %v after a key of the same name was set; want %+v", q, err, tenant)
	}
	if all, err := rq.List(ctx); err != nil || len(all.Tenants) != 1 {
		t.Errorf("List = %+v, %v; want the one tenant, no keys", all, err)
	}

	if err := rq.DeleteKey(ctx, "db:reports"); err != nil {
		t.Fatal(err)
	}
	if err := rq.DeleteKey(ctx, "db:reports"); err != nil {
		t.Errorf("deleting a key with no quota = %v, want nil", err)
	}
	if _, err := rq.GetKey(ctx, "db:reports"); !errors.Is(err, admission.ErrNoQuota) {
		t.Errorf("GetKey after DeleteKey = %v, want ErrNoQuota", err)
	}
	if q, err := rq.Get(ctx, "acme"); err != nil || q != tenant {
		t.Errorf("DeleteKey touched tenant acme: %+v, %v", q, err)
	}

	// Entries written by hand: one that does not decode, one that is a
	// tenant's quota rather than a key's.
	for v, field := range map[string]string{`{"limit":`: "", `{"limit":5,"window":"1s"}`: "Limit"} {
		if err := rdb.HSet(ctx, "kq:keyquotas", "hand", v).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := rq.GetKey(ctx, "hand")
		if !errors.Is(err, admission.ErrInvalidQuota) || !strings.Contains(err.Error(), `key "hand"`) || !strings.Contains(err.Error(), field) {
			t.Errorf("GetKey of %s = %v; want ErrInvalidQuota naming key \"hand\"", v, err)
		}
		if _, err := rq.ListKeys(ctx); !errors.Is(err, admission.ErrInvalidQuota) || !strings.Contains(err.Error(), `key "hand"`) {
			t.Errorf("ListKeys with %s = %v; want ErrInvalidQuota naming key \"hand\"", v, err)
		}
		g := admission.New(rdb, rq)
		if _, ok, err := g.KeyQuota(ctx, "hand"); ok || !errors.Is(err, admission.ErrInvalidQuota) {
			t.Errorf("Gate.KeyQuota of %s = %v, %v; want ErrInvalidQuota", v, ok, err)
		}
		g.Close()
		rq = admission.NewRedisQuotas(rdb, admission.WithPrefix("kq")) // a fresh cache for the next entry
	}
}

// TestGateKeyQuota: the gate reads keys' quotas from its Quotas, static or
// in Redis; a key without one is unlimited (ok false), as is every key of
// a Quotas that keeps none. A change made by another process reaches the
// gate within about a second, and meanwhile lookups come from the cache.
func TestGateKeyQuota(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	capped := admission.Quota{Limit: admission.NoLimit, MaxInFlight: 2}

	static := admission.StaticQuotas{Keys: map[string]admission.Quota{
		"api":  capped,
		"rate": {Limit: 5, Window: time.Second},
	}}
	srv := redistest.Start(t)
	g := admission.New(srv.Client(t), static)
	t.Cleanup(func() { g.Close() })
	if q, ok, err := g.KeyQuota(ctx, "api"); err != nil || !ok || q != capped {
		t.Errorf("KeyQuota(api) = %+v, %v, %v; want %+v", q, ok, err, capped)
	}
	if q, ok, err := g.KeyQuota(ctx, "other"); err != nil || ok || q != (admission.Quota{}) {
		t.Errorf("KeyQuota of a key without a quota = %+v, %v, %v; want unlimited", q, ok, err)
	}
	if _, ok, err := g.KeyQuota(ctx, "rate"); ok || !errors.Is(err, admission.ErrInvalidQuota) || !strings.Contains(err.Error(), `key "rate"`) {
		t.Errorf("KeyQuota of a key with a rate limit = %v, %v; want ErrInvalidQuota naming the key", ok, err)
	}
	if _, ok, err := g.KeyQuota(ctx, ""); ok || !errors.Is(err, admission.ErrInvalidKey) {
		t.Errorf("KeyQuota(\"\") = %v, %v; want ErrInvalidKey", ok, err)
	}
	noKeys := admission.New(srv.Client(t), tenantsOnly{})
	t.Cleanup(func() { noKeys.Close() })
	if _, ok, err := noKeys.KeyQuota(ctx, "api"); ok || err != nil {
		t.Errorf("KeyQuota from a Quotas without keys = %v, %v; want unlimited", ok, err)
	}

	// In Redis: an operator's store and a gate's, as in two processes.
	count := &commandCount{}
	rdb := srv.Client(t)
	rdb.AddHook(count)
	operator := admission.NewRedisQuotas(srv.Client(t))
	rg := admission.New(rdb, admission.NewRedisQuotas(rdb))
	t.Cleanup(func() { rg.Close() })
	if err := operator.SetKey(ctx, "api", capped); err != nil {
		t.Fatal(err)
	}
	if q, ok, err := rg.KeyQuota(ctx, "api"); err != nil || !ok || q != capped {
		t.Fatalf("KeyQuota(api) = %+v, %v, %v; want %+v", q, ok, err, capped)
	}
	if _, ok, err := rg.KeyQuota(ctx, "none"); ok || err != nil {
		t.Fatalf("KeyQuota(none) = %v, %v; want unlimited", ok, err)
	}
	before := count.n.Load()
	for range 100 {
		if _, _, err := rg.KeyQuota(ctx, "api"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := rg.KeyQuota(ctx, "none"); err != nil {
			t.Fatal(err)
		}
	}
	if n := count.n.Load() - before; n > 2 {
		t.Errorf("200 cached lookups sent %d commands; want at most a background reread each", n)
	}

	paused := admission.Quota{Limit: admission.NoLimit, MaxInFlight: 2, Paused: true}
	eventually := func(desc string, want admission.Quota, wantOK bool) {
		t.Helper()
		changed := time.Now()
		for {
			q, ok, err := rg.KeyQuota(ctx, "api")
			if err == nil && ok == wantOK && q == want {
				t.Logf("%s reached the gate in %v", desc, time.Since(changed).Round(time.Millisecond))
				return
			}
			if time.Since(changed) > 3*time.Second {
				t.Fatalf("%s: KeyQuota(api) still %+v, %v, %v after %v", desc, q, ok, err, time.Since(changed))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := operator.SetKey(ctx, "api", paused); err != nil {
		t.Fatal(err)
	}
	eventually("a pause", paused, true)
	if err := operator.DeleteKey(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	eventually("a delete", admission.Quota{}, false)

	// While Redis is down, a cached key keeps its answer; one never looked
	// up gets ErrUnavailable.
	if err := operator.SetKey(ctx, "api", capped); err != nil {
		t.Fatal(err)
	}
	eventually("a new cap", capped, true)
	srv.Kill()
	if q, ok, err := rg.KeyQuota(ctx, "api"); err != nil || !ok || q != capped {
		t.Errorf("KeyQuota(api) with Redis down = %+v, %v, %v; want the cached %+v", q, ok, err, capped)
	}
	if _, ok, err := rg.KeyQuota(ctx, "never"); ok || !errors.Is(err, admission.ErrUnavailable) {
		t.Errorf("KeyQuota of an uncached key with Redis down = %v, %v; want ErrUnavailable", ok, err)
	}
}

// tenantsOnly is a Quotas that keeps no key quotas.
type tenantsOnly struct{ admission.Quotas }
