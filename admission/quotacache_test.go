package admission

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/admitq/admitq/internal/redistest"
)

// TestQuotaCacheEvictsLeastRecentlyUsed: a full cache makes room by
// evicting one tenant, the one used least recently; replacing an entry or
// rereading it in the background evicts nothing and brings nothing back.
func TestQuotaCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := newQuotaCache(3)
	now := time.Now()
	q := func(n int) Quota { return Quota{Limit: n, Window: time.Second} }
	has := func(want ...string) {
		t.Helper()
		if c.len() != len(want) {
			t.Fatalf("cache holds %d tenants, want %d (%v)", c.len(), len(want), want)
		}
		for _, tenant := range want {
			if _, ok := c.peek(tenant); !ok {
				t.Fatalf("cache lost %q, want %v", tenant, want)
			}
		}
	}
	c.put("a", q(1), nil, now)
	c.put("b", q(2), nil, now)
	c.put("c", q(3), nil, now)
	c.get("a") // b is now the least recently used
	c.put("d", q(4), nil, now)
	has("a", "c", "d")

	c.put("c", q(30), nil, now) // a replacement evicts nothing, and counts as a use
	has("a", "c", "d")
	if e, _ := c.peek("c"); e.q.Limit != 30 {
		t.Fatalf("replaced entry holds %v, want limit 30", e.q)
	}
	c.update("a", q(10), nil, now) // a reread: no use, so a stays the oldest
	c.update("b", q(20), nil, now) // b was evicted: a reread does not bring it back
	has("a", "c", "d")
	c.put("e", q(5), nil, now)
	has("c", "d", "e")
	if e, _ := c.peek("c"); e.q.Limit != 30 {
		t.Fatalf("c = %v after evicting a, want limit 30", e.q)
	}

	c.remove("d")
	has("c", "e")
	c.clear()
	has()
}

// TestQuotaCacheHitsPastItsBound: with more tenants than the cache holds
// (130k against 100k), the tenants in steady use are still answered
// locally while a flood of new tenants passes through, and while their
// entries are reread in the background. A cache that wiped itself when
// full sent every one of their lookups to Redis.
func TestQuotaCacheHitsPastItsBound(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	hook := &countHook{}
	rdb.AddHook(hook)
	r := NewRedisQuotas(rdb, WithRefresh(20*time.Millisecond))
	// The cache past its bound is under test, not the age past which an
	// entry is read before it is answered: under -race, a round's new
	// lookups outlast that.
	r.opts.staleFor = time.Hour
	q := Quota{Limit: 10, Window: time.Second}
	if err := r.SetDefault(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	// A full cache: 100k tenants seen long ago, then 20k in steady use.
	now := time.Now()
	for i := range DefaultQuotaCacheSize {
		r.store(&r.tenants, "cold-"+strconv.Itoa(i), q, nil, now)
	}
	hot := make([]string, 20_000)
	for i := range hot {
		hot[i] = "hot-" + strconv.Itoa(i)
		r.store(&r.tenants, hot[i], q, nil, now)
	}

	const rounds, newPerRound = 2, 5_000
	fg := context.WithValue(t.Context(), fgKey{}, true)
	var hotLookups, hotMisses int64
	for round := range rounds {
		time.Sleep(30 * time.Millisecond) // every entry is stale now: lookups reread them
		for i := range newPerRound {
			if _, err := r.Quota(t.Context(), "new-"+strconv.Itoa(round)+"-"+strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
		}
		before := hook.fg.Load()
		for _, tenant := range hot {
			if _, err := r.Quota(fg, tenant); err != nil {
				t.Fatal(err)
			}
		}
		hotLookups += int64(len(hot))
		hotMisses += hook.fg.Load() - before
	}
	if ratio := 1 - float64(hotMisses)/float64(hotLookups); ratio < 0.99 {
		t.Errorf("hit ratio of tenants in steady use = %.4f (%d of %d lookups went to Redis), want >= 0.99",
			ratio, hotMisses, hotLookups)
	}
	r.mu.Lock()
	n := r.tenants.cache.len()
	r.mu.Unlock()
	if n != DefaultQuotaCacheSize {
		t.Errorf("cache holds %d tenants after %d distinct, want its bound %d",
			n, DefaultQuotaCacheSize+len(hot)+rounds*newPerRound, DefaultQuotaCacheSize)
	}
}

// TestAnOldCachedQuotaIsReadAgain: a cached quota is answered stale, while
// it is reread in the background, only until the refresh interval and
// defaultStaleFor more have passed; after that the lookup reads it first, so a
// producer idle for a while acts on the quota of now, not on one from
// before a change (which it would write into a dispatched queue's
// records). While Redis is down the old entry is answered, without
// waiting after the first look.
func TestAnOldCachedQuotaIsReadAgain(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	r := NewRedisQuotas(rdb, WithRefresh(50*time.Millisecond), WithTimeout(200*time.Millisecond))
	old, changed := Quota{Limit: 5, Window: time.Second, MaxInFlight: 3}, Quota{Limit: 5, Window: time.Second, MaxInFlight: 1}
	if err := r.Set(ctx, "acme", old); err != nil {
		t.Fatal(err)
	}
	if q, err := r.Quota(ctx, "acme"); err != nil || q != old {
		t.Fatalf("first lookup: %v, %v", q, err)
	}
	if err := NewRedisQuotas(rdb).Set(ctx, "acme", changed); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50*time.Millisecond + defaultStaleFor + 20*time.Millisecond)
	if q, err := r.Quota(ctx, "acme"); err != nil || q != changed {
		t.Errorf("lookup of an entry older than refresh + defaultStaleFor: %v, %v; want the quota of now, %v", q, err, changed)
	}

	time.Sleep(50*time.Millisecond + defaultStaleFor + 20*time.Millisecond)
	srv.Pause()
	defer srv.Resume()
	for i, most := range []time.Duration{time.Second, 10 * time.Millisecond} {
		start := time.Now()
		q, err := r.Quota(ctx, "acme")
		if err != nil || q != changed {
			t.Errorf("lookup %d with Redis down: %v, %v; want the cached %v", i, q, err, changed)
		}
		if took := time.Since(start); took > most {
			t.Errorf("lookup %d with Redis down took %v, want at most %v", i, took, most)
		}
	}
}
