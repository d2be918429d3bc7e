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
