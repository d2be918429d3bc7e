package admission

import (
	"sync"
	"time"
)

// denyCache remembers tenants Redis rejected until a known time. Until then
// every new request of that tenant would be rejected too (slots only move
// forward), so the gate answers locally and a flood from one tenant costs
// Redis almost nothing. An entry holds for the quota it was made under; a
// quota change or a Release through this gate ends it early.
type denyCache struct {
	max int

	mu      sync.RWMutex
	entries map[string]denial
}

type denial struct {
	q     Quota
	until time.Time // local clock
	now   time.Time // Redis time of the rejection
	at    time.Time // Redis time a retry could succeed
}

func newDenyCache(max int) *denyCache {
	return &denyCache{max: max, entries: make(map[string]denial)}
}

// lookup returns the rejection that still holds for tenant under q.
func (c *denyCache) lookup(tenant string, q Quota, now time.Time) (denial, bool) {
	c.mu.RLock()
	d, ok := c.entries[tenant]
	c.mu.RUnlock()
	if !ok || d.q != q || !now.Before(d.until) {
		return denial{}, false
	}
	return d, true
}

// put records that Redis rejected tenant until r.At.
func (c *denyCache) put(tenant string, q Quota, r Decision, now time.Time) {
	d := denial{q: q, until: now.Add(r.At.Sub(r.Now)), now: r.Now, at: r.At}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		for t, e := range c.entries {
			if !now.Before(e.until) {
				delete(c.entries, t)
			}
		}
		if len(c.entries) >= c.max {
			clear(c.entries) // forgetting a denial costs one script call, never correctness
		}
	}
	c.entries[tenant] = d
}

func (c *denyCache) forget(tenant string) {
	c.mu.Lock()
	delete(c.entries, tenant)
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
