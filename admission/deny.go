package admission

import (
	"sync"
	"sync/atomic"
	"time"
)

// denyCache remembers tenants whose every new request Redis will reject
// until a known time: admit.lua returns that time (the retry hint) with a
// rejection, and also with the admission that fills the window. Until
// then the gate answers locally (slots only move forward), so a flood from
// one tenant costs Redis about one script call per admission. An entry
// holds for the quota and granularity it was made under (a request under
// another goes to Redis); a Release through this gate, or a slot given
// back for a caller that left, ends it.
//
// Once the time passes, requests go to Redis again, each on its own: the
// first takes the slot that freed up and, the window full again, brings
// back the next time. Only requests that arrive during that one call's
// round trip reach Redis to be rejected, a small share of a flood's
// rejections (see TestDenyCacheFlood), and nothing waits.
//
// A Release frees a slot that a call already in flight may not have seen:
// its reply could then cache a rejection that no longer holds. So every
// forget moves the tenant's generation on, and put drops a rejection from
// a call that began in an older one. Generations are kept for 64 stripes
// of tenants rather than for each: bounded, and a Release costs the other
// tenants of its stripe at most a cached rejection now and then.
//
// A nil *denyCache is a cache that is off: it holds nothing.
type denyCache struct {
	max  int
	gens [64]atomic.Uint64 // by stripe of tenant; moved on by forget, under mu

	mu      sync.RWMutex
	entries map[string]denial
}

// A denial is a rejection of every new request of a tenant until a time.
type denial struct {
	q     Quota
	gran  int64     // the granularity the hint was computed at
	until time.Time // local clock
	now   time.Time // Redis time of the reply that told it
	at    time.Time // Redis time a retry could succeed
}

func newDenyCache(max int) *denyCache {
	return &denyCache{max: max, entries: make(map[string]denial)}
}

// lookup returns the rejection that holds for tenant under q at gran at
// the local time now, if any.
//
// A hint holds only at the granularity it was computed at: rounding moves
// the slot a request could get, so gates that share the cache at another
// granularity (Gate.AtGranularity) ask Redis instead.
func (c *denyCache) lookup(tenant string, q Quota, gran int64, now time.Time) (denial, bool) {
	if c == nil {
		return denial{}, false
	}
	c.mu.RLock()
	d, ok := c.entries[tenant]
	c.mu.RUnlock()
	if !ok || d.q != q || d.gran != gran || !now.Before(d.until) {
		return denial{}, false
	}
	return d, true
}

// generation returns tenant's current generation, for a call about to go
// to Redis to hand to put.
func (c *denyCache) generation(tenant string) uint64 {
	if c == nil {
		return 0
	}
	return c.gens[stripe(tenant)].Load()
}

// stripe hashes tenant (FNV-1a) to one of the generation stripes.
func stripe(tenant string) int {
	h := uint32(2166136261)
	for i := 0; i < len(tenant); i++ {
		h = (h ^ uint32(tenant[i])) * 16777619
	}
	return int(h % 64)
}

// put records the retry hint of a reply: Redis, at its time serverNow,
// will reject every new request of tenant until its time hint (zero for
// none), unless the call that said so began before the generation gen
// ended. now is the local time the reply arrived.
//
// The hint is mapped to the local clock from the reply's arrival, a
// one-way trip after the script ran; a request sent at the hint's local
// time would reach Redis a one-way trip later too. So the cache stops
// answering about when Redis starts admitting: late by at most the
// difference between the two trips and the delivery of the reply, well
// under a round trip. (Mapping from the send time instead would send
// requests early, and each would cost a script call Redis only rejects.)
func (c *denyCache) put(tenant string, q Quota, gran int64, serverNow, hint, now time.Time, gen uint64) {
	if c == nil || hint.IsZero() {
		return
	}
	d := denial{q: q, gran: gran, until: now.Add(hint.Sub(serverNow)), now: serverNow, at: hint}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gens[stripe(tenant)].Load() != gen {
		return // a Release may have freed a slot the call did not see
	}
	if len(c.entries) >= c.max {
		for t, e := range c.entries {
			if !now.Before(e.until) {
				delete(c.entries, t)
			}
		}
		if len(c.entries) >= c.max {
			clear(c.entries) // forgetting a rejection costs a script call, never correctness
		}
	}
	c.entries[tenant] = d
}

// forget drops tenant's rejection, and any that calls now in flight would
// bring back.
func (c *denyCache) forget(tenant string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.entries, tenant)
	c.gens[stripe(tenant)].Add(1)
	c.mu.Unlock()
}

// decisions answers ids from d: all rejected, Now moved on by the time
// that passed locally since Redis decided.
func (d denial) decisions(tenant string, ids []string, now time.Time) []Decision {
	elapsed := now.Sub(d.until.Add(-d.at.Sub(d.now)))
	ds := make([]Decision, len(ids))
	for i := range ids {
		ds[i] = Decision{Tenant: tenant, Outcome: Rejected, Now: d.now.Add(elapsed), At: d.at, Local: true}
	}
	return ds
}
