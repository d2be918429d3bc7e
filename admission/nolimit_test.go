package admission_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestNoLimitValidate: a Quota with Limit NoLimit is valid whatever its
// (ignored) window, in either mode, and with caps, weights and pause; a
// cap in counter mode is valid, with a rate limit or without; the other
// fields keep their ranges, and no other negative Limit passes.
func TestNoLimitValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		desc  string
		q     admission.Quota
		field string // "" for valid
	}{
		{"no window", admission.Quota{Limit: admission.NoLimit}, ""},
		{"a window, ignored", admission.Quota{Limit: admission.NoLimit, Window: time.Minute, MaxDelay: time.Hour}, ""},
		{"counter mode", admission.Quota{Limit: admission.NoLimit, Mode: admission.Counter}, ""},
		{"caps, weighs and pauses", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 4, MaxParked: 100, Weight: 3, Paused: true}, ""},
		{"a sub-millisecond window, ignored", admission.Quota{Limit: admission.NoLimit, Window: time.Microsecond}, ""},
		{"a negative window", admission.Quota{Limit: admission.NoLimit, Window: -time.Second}, "Window"},
		{"a window past MaxWindow", admission.Quota{Limit: admission.NoLimit, Window: admission.MaxWindow + 1}, "Window"},
		{"a negative MaxDelay", admission.Quota{Limit: admission.NoLimit, MaxDelay: -1}, "MaxDelay"},
		{"a cap in counter mode", admission.Quota{Limit: admission.NoLimit, Mode: admission.Counter, MaxInFlight: 1}, ""},
		{"a rate and a cap in counter mode", admission.Quota{Limit: 1000, Window: time.Second, Mode: admission.Counter, MaxInFlight: 2}, ""},
		{"Limit -2", admission.Quota{Limit: -2, Window: time.Second}, "Limit"},
		{"Limit 0", admission.Quota{Limit: 0, Window: time.Second}, "Limit"},
		{"a limit without a window", admission.Quota{Limit: 1}, "Window"},
	} {
		err := c.q.Validate()
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: Validate(%+v) = %v, want nil", c.desc, c.q, err)
		case c.field != "" && (!errors.Is(err, admission.ErrInvalidQuota) || !strings.Contains(err.Error(), c.field)):
			t.Errorf("%s: Validate(%+v) = %v, want ErrInvalidQuota naming %s", c.desc, c.q, err, c.field)
		}
	}
}

// TestNoLimitAndPausedRoundTrip: NoLimit and Paused survive the quota
// hash's encoding, by MarshalText and through RedisQuotas, and String
// says what applies.
func TestNoLimitAndPausedRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		q    admission.Quota
		text string
	}{
		{admission.Quota{Limit: admission.NoLimit}, "no limit"},
		{admission.Quota{Limit: admission.NoLimit, Window: time.Minute, MaxDelay: time.Second, Mode: admission.Counter}, "no limit"},
		{admission.Quota{Limit: admission.NoLimit, MaxInFlight: 4, Weight: 2, Paused: true}, "no limit, max in flight 4, max parked 10000, weight 2, paused"},
		{admission.Quota{Limit: 5, Window: time.Second, MaxDelay: time.Minute, Paused: true}, "5/1s, max delay 1m0s, paused"},
		{admission.Quota{Limit: 5, Window: time.Second}, "5/1s"},
	} {
		if got := c.q.String(); got != c.text {
			t.Errorf("String(%+v) = %q, want %q", c.q, got, c.text)
		}
		b, err := c.q.MarshalText()
		if err != nil {
			t.Fatalf("MarshalText(%+v): %v", c.q, err)
		}
		var got admission.Quota
		if err := got.UnmarshalText(b); err != nil || got != c.q {
			t.Errorf("round trip of %+v through %s = %+v, %v", c.q, b, got, err)
		}
		if c.q.Paused != strings.Contains(string(b), `"paused":true`) || strings.Contains(string(b), `"paused":false`) {
			t.Errorf("%+v encodes as %s: paused should be there exactly when set", c.q, b)
		}
	}
	// A quota written before Paused existed reads as not paused.
	var old admission.Quota
	if err := old.UnmarshalText([]byte(`{"limit":3,"window":"1s","max_in_flight":2}`)); err != nil || old.Paused {
		t.Errorf("an entry without paused = %+v, %v; want not paused", old, err)
	}

	rdb := redistest.Start(t).Client(t)
	rq := admission.NewRedisQuotas(rdb, admission.WithPrefix("nl"))
	want := admission.StaticQuotas{
		Default: &admission.Quota{Limit: admission.NoLimit, Paused: true},
		Tenants: map[string]admission.Quota{
			"free":   {Limit: admission.NoLimit, MaxInFlight: 2},
			"paused": {Limit: 10, Window: time.Minute, Paused: true},
		},
	}
	if err := rq.SetDefault(t.Context(), *want.Default); err != nil {
		t.Fatal(err)
	}
	for tenant, q := range want.Tenants {
		if err := rq.Set(t.Context(), tenant, q); err != nil {
			t.Fatal(err)
		}
		if got, err := rq.Get(t.Context(), tenant); err != nil || got != q {
			t.Errorf("Get(%q) = %+v, %v; want %+v", tenant, got, err, q)
		}
	}
	got, err := rq.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want,+got):\n%s", diff)
	}
}

// commandCount counts the commands a client sends, pipelined or not.
type commandCount struct{ n atomic.Int64 }

func (c *commandCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestNoLimitAdmitsWithoutRedis: a tenant whose quota has no rate limit is
// admitted on every call, however many, by every admission call, under
// the IDs asked for, with no Redis call at all: not even the version
// check, and not while Redis is down. Its decisions are Local, with
// Remaining NoLimit, and Release of one is a no-op. Its usage is empty.
func TestNoLimitAdmitsWithoutRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, mode := range []admission.Mode{admission.Log, admission.Counter} {
		t.Run(mode.String(), func(t *testing.T) {
			rdb := srv.Client(t)
			q := admission.Quota{Limit: admission.NoLimit, Mode: mode}
			g := admission.New(rdb, static(q), admission.WithPrefix("nolimit-"+mode.String()))
			t.Cleanup(func() { g.Close() })
			// Added after New, so inside the gate's own hooks: it counts
			// what reaches the connection, not New's probe of the hooks,
			// which they stop.
			count := &commandCount{}
			rdb.AddHook(count)
			ctx := t.Context()
			check := func(call string, ds []admission.Decision, ids []string) {
				t.Helper()
				for i, d := range ds {
					if d.Outcome != admission.Admitted || !d.Local || d.Remaining != admission.NoLimit || d.Tenant != "free" ||
						d.ID == "" || (ids != nil && d.ID != ids[i]) || !d.At.Equal(d.Now) || d.Now.IsZero() {
						t.Fatalf("%s: decision %d = %+v; want admitted now, local, Remaining NoLimit, ID %v", call, i, d, ids)
					}
				}
			}
			seen := map[string]bool{}
			for range 2000 {
				d, err := g.Admit(ctx, "free")
				if err != nil {
					t.Fatalf("Admit: %v", err)
				}
				check("Admit", []admission.Decision{d}, nil)
				if seen[d.ID] {
					t.Fatalf("Admit generated ID %q twice", d.ID)
				}
				seen[d.ID] = true
			}
			d, err := g.AdmitID(ctx, "free", "job-1")
			if err != nil {
				t.Fatal(err)
			}
			check("AdmitID", []admission.Decision{d}, []string{"job-1"})
			d, err = g.AdmitAt(ctx, "free", "job-2", time.Now().Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			check("AdmitAt", []admission.Decision{d}, []string{"job-2"})
			ids := []string{"a", "b", "c"}
			ds, err := g.AdmitBatch(ctx, "free", ids)
			if err != nil || len(ds) != len(ids) {
				t.Fatalf("AdmitBatch = %v, %v", ds, err)
			}
			check("AdmitBatch", ds, ids)
			ds, err = g.AdmitBatchAt(ctx, "free", ids, time.Now().Add(time.Minute))
			if err != nil || len(ds) != len(ids) {
				t.Fatalf("AdmitBatchAt = %v, %v", ds, err)
			}
			check("AdmitBatchAt", ds, ids)
			if err := g.Release(ctx, d); err != nil {
				t.Fatalf("Release = %v", err)
			}
			u, err := g.Usage(ctx, "free")
			if err != nil || u.InWindow != 0 || u.Reserved != 0 || !u.NextFree.Equal(u.Now) || u.Quota != q {
				t.Fatalf("Usage = %+v, %v; want nothing in the window or ahead, next free now", u, err)
			}
			for _, r := range g.UsageBatch(ctx, []string{"free"}) {
				if r.Err != nil || r.Usage.InWindow != 0 || !r.Usage.NextFree.Equal(r.Usage.Now) {
					t.Fatalf("UsageBatch = %+v", r)
				}
			}
			if n := count.n.Load(); n != 0 {
				t.Errorf("%d Redis commands for a tenant with no rate limit, want none", n)
			}
			if keys := srv.Client(t).Keys(ctx, "nolimit-*").Val(); len(keys) != 0 {
				t.Errorf("keys %v written for a tenant with no rate limit", keys)
			}
		})
	}

	t.Run("Redis down", func(t *testing.T) {
		gone := redistest.Start(t)
		rdb := gone.Client(t)
		gone.Kill()
		g := admission.New(rdb, static(admission.Quota{Limit: admission.NoLimit}), admission.WithTimeout(50*time.Millisecond))
		t.Cleanup(func() { g.Close() })
		for range 3 {
			if d, err := g.Admit(t.Context(), "free"); err != nil || d.Outcome != admission.Admitted {
				t.Fatalf("Admit with Redis down, FailClosed = %+v, %v; want admitted: no Redis call is needed", d, err)
			}
		}
	})
}

// TestNoLimitUsageTop: tenants without a rate limit rank as holding none
// of it, after the ones that hold some, and are never read from Redis.
func TestNoLimitUsageTop(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	quotas := admission.StaticQuotas{
		Default: &admission.Quota{Limit: 10, Window: time.Minute},
		Tenants: map[string]admission.Quota{"free": {Limit: admission.NoLimit}},
	}
	g := admission.New(rdb, quotas)
	t.Cleanup(func() { g.Close() })
	for range 3 {
		if _, err := g.Admit(t.Context(), "busy"); err != nil {
			t.Fatal(err)
		}
	}
	top := g.UsageTop(t.Context(), []string{"free", "busy", "idle"}, 0)
	var order []string
	for _, r := range top {
		if r.Err != nil {
			t.Fatalf("UsageTop: %s: %v", r.Usage.Tenant, r.Err)
		}
		order = append(order, r.Usage.Tenant)
	}
	if diff := cmp.Diff([]string{"busy", "free", "idle"}, order); diff != "" {
		t.Errorf("UsageTop order (-want,+got):\n%s", diff)
	}
	if top[0].Usage.InWindow != 3 || top[1].Usage.InWindow != 0 || top[1].Usage.Quota.Limit != admission.NoLimit {
		t.Errorf("UsageTop = %+v", top)
	}
}

// TestNoLimitGuessedDuringOutage: under FailOpen, a tenant not yet cached
// while Redis is down gets the last default read; when that default has
// no rate limit, the tenant is admitted as such.
func TestNoLimitGuessedDuringOutage(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	rq := admission.NewRedisQuotas(rdb, admission.WithTimeout(100*time.Millisecond))
	if err := rq.SetDefault(t.Context(), admission.Quota{Limit: admission.NoLimit}); err != nil {
		t.Fatal(err)
	}
	g := admission.New(rdb, rq, admission.WithFailurePolicy(admission.FailOpen), admission.WithTimeout(100*time.Millisecond))
	t.Cleanup(func() { g.Close() })
	if d, err := g.Admit(t.Context(), "seen"); err != nil || d.Remaining != admission.NoLimit {
		t.Fatalf("Admit = %+v, %v", d, err)
	}
	srv.Kill()
	d, err := g.Admit(t.Context(), "new")
	if err != nil || d.Outcome != admission.Admitted || d.Remaining != admission.NoLimit || !d.Local {
		t.Fatalf("Admit of an uncached tenant during an outage = %+v, %v; want admitted, no limit", d, err)
	}
}
