package admission

import (
	"sync"
	"sync/atomic"
	"time"
)

// denyCache remembers tenants whose every new request Redis will reject
// until a known time: admit.lua returns that time with a rejection, and
// also with the admission that fills the window. Until then the gate
// answers locally (slots only move forward), so a flood from one tenant
// costs Redis one script call per admission and almost nothing more. An
// entry holds for the quota it was made under; a quota change or a Release
// through this gate ends it early.
//
// When an entry's time passes, the next request probes Redis, and requests
// that arrive while the probe is out wait for it rather than send calls of
// their own: the probe takes the slot that freed up and, the window full
// again, brings back the next time. So a flood costs one call per
// admission, not one per admission plus one per request that raced it.
//
// A Release frees a slot that a call already in flight may not have seen:
// its reply could then cache a rejection that no longer holds. So every
// forget moves the tenant's generation on, and put drops a rejection from
// a call that began in an older one. Generations are kept for 64 stripes
// of tenants rather than for each: bounded, and a Release costs the other
// tenants of its stripe at most a cached rejection now and then.
type denyCache struct {
	max  int
	gens [64]atomic.Uint64 // by stripe of tenant; moved on by forget, under mu

	mu      sync.RWMutex
	entries map[string]denial
}

type denial struct {
	q     Quota
	gran  int64         // the granularity the hint was computed at
	until time.Time     // local clock
	now   time.Time     // Redis time of the rejection
	at    time.Time     // Redis time a retry could succeed
	probe chan struct{} // closed when the probe after until ends; nil when none is out
}

func newDenyCache(max int) *denyCache {
	return &denyCache{max: max, entries: make(map[string]denial)}
}

// lookup returns the rejection that still holds for tenant under q, or
// says how to go to Redis: when the rejection's time has passed, the first
// caller gets probe, a channel it must hand to probed once its call ends,
// and callers after it get wait, which is closed then; they should look
// again. All are nil on a plain miss.
//
// A hint holds only at the granularity it was computed at: rounding moves
// the slot a request could get, so gates that share the cache at another
// granularity (Gate.AtGranularity) ask Redis instead.
func (c *denyCache) lookup(tenant string, q Quota, gran int64, now time.Time) (d denial, ok bool, probe, wait chan struct{}) {
	c.mu.RLock()
	d, ok = c.entries[tenant]
	c.mu.RUnlock()
	if !ok || d.q != q || d.gran != gran {
		return denial{}, false, nil, nil
	}
	if now.Before(d.until) {
		return d, true, nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok = c.entries[tenant]
	switch {
	case !ok || d.q != q || d.gran != gran:
		return denial{}, false, nil, nil
	case now.Before(d.until): // a probe brought a new time meanwhile
		return d, true, nil, nil
	case d.probe != nil:
		return denial{}, false, nil, d.probe
	}
	d.probe = make(chan struct{})
	c.entries[tenant] = d
	return denial{}, false, d.probe, nil
}

// probed ends the probe that lookup handed out as probe, after its call
// (and its put, if the call brought a new time). Without a new time the
// tenant has room again, and its expired entry goes.
func (c *denyCache) probed(tenant string, probe chan struct{}) {
	c.mu.Lock()
	if d, ok := c.entries[tenant]; ok && d.probe == probe {
		delete(c.entries, tenant)
	}
	c.mu.Unlock()
	close(probe)
}

// generation returns tenant's current generation, for a call about to go
// to Redis to hand to put.
func (c *denyCache) generation(tenant string) uint64 { return c.gens[stripe(tenant)].Load() }

// stripe hashes tenant (FNV-1a) to one of the generation stripes.
func stripe(tenant string) int {
	h := uint32(2166136261)
	for i := 0; i < len(tenant); i++ {
		h = (h ^ uint32(tenant[i])) * 16777619
	}
	return int(h % 64)
}

// put records that Redis, at its time serverNow, will reject every new
// request of tenant until its time at, unless the call that said so began
// before the generation gen ended.
func (c *denyCache) put(tenant string, q Quota, gran int64, serverNow, at, now time.Time, gen uint64) {
	d := denial{q: q, gran: gran, until: now.Add(at.Sub(serverNow)), now: serverNow, at: at}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gens[stripe(tenant)].Load() != gen {
		return // a Release may have freed a slot the call did not see
	}
	if len(c.entries) >= c.max {
		for t, e := range c.entries {
			if !now.Before(e.until) && e.probe == nil {
				delete(c.entries, t)
			}
		}
		if len(c.entries) >= c.max {
			clear(c.entries) // forgetting a denial costs one script call, never correctness
		}
	}
	c.entries[tenant] = d
}

// forget drops tenant's rejection, and any that calls now in flight would
// bring back.
func (c *denyCache) forget(tenant string) {
	c.mu.Lock()
	delete(c.entries, tenant)
	c.gens[stripe(tenant)].Add(1)
	c.mu.Unlock()
}

// decisions answers ids from d: all rejected, At moved on by the time that
// passed locally since Redis decided.
func (d denial) decisions(tenant string, ids []string, now time.Time) []Decision {
	elapsed := now.Sub(d.until.Add(-d.at.Sub(d.now)))
	ds := make([]Decision, len(ids))
	for i := range ids {
		ds[i] = Decision{Tenant: tenant, Outcome: Rejected, Now: d.now.Add(elapsed), At: d.at, Local: true}
	}
	return ds
}
