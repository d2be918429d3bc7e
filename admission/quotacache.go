package admission

import (
	"container/list"
	"time"
)

// DefaultQuotaCacheSize is how many tenants' quotas a RedisQuotas keeps
// cached when WithQuotaCacheSize is not given. An entry costs about 200
// bytes plus the tenant's name, so the default holds to some 30 MB.
const DefaultQuotaCacheSize = 100_000

// WithQuotaCacheSize bounds how many tenants' quotas a RedisQuotas keeps
// cached; 0 or less keeps DefaultQuotaCacheSize. When it is full, the
// tenant looked up least recently makes room: a tenant stays cached as long
// as fewer than n other tenants are looked up between two of its own
// lookups, however many tenants there are in all.
func WithQuotaCacheSize(n int) Option {
	return optionFunc(func(o *options) {
		if n > 0 {
			o.quotaCacheSize = n
		}
	})
}

// quotaCache holds cached quota lookups, at most max of them, and evicts
// the least recently used tenant to make room: one at a time, never all.
// It is not safe for concurrent use; RedisQuotas guards it with its mutex.
//
// It is written out on container/list rather than taken from an LRU
// library because its entries carry RedisQuotas's refresh state, which
// must be updated in place without counting as a use.
type quotaCache struct {
	max int
	m   map[string]*list.Element // of *cachedQuota
	ll  list.List                // front: most recently used
}

type cachedQuota struct {
	tenant     string
	q          Quota
	err        error
	fetched    time.Time
	refreshing bool
}

func newQuotaCache(max int) *quotaCache {
	if max <= 0 {
		max = DefaultQuotaCacheSize
	}
	return &quotaCache{max: max, m: make(map[string]*list.Element)}
}

// get returns tenant's entry, and marks it as used just now.
func (c *quotaCache) get(tenant string) (*cachedQuota, bool) {
	e, ok := c.m[tenant]
	if !ok {
		return nil, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(*cachedQuota), true
}

// peek returns tenant's entry without marking it as used.
func (c *quotaCache) peek(tenant string) (*cachedQuota, bool) {
	e, ok := c.m[tenant]
	if !ok {
		return nil, false
	}
	return e.Value.(*cachedQuota), true
}

// put stores tenant's lookup. Replacing an entry evicts nothing; a new
// tenant in a full cache evicts the least recently used one.
func (c *quotaCache) put(tenant string, q Quota, err error, fetched time.Time) {
	if e, ok := c.m[tenant]; ok {
		*e.Value.(*cachedQuota) = cachedQuota{tenant: tenant, q: q, err: err, fetched: fetched}
		c.ll.MoveToFront(e)
		return
	}
	if c.ll.Len() >= c.max {
		oldest := c.ll.Back()
		c.ll.Remove(oldest)
		delete(c.m, oldest.Value.(*cachedQuota).tenant)
	}
	c.m[tenant] = c.ll.PushFront(&cachedQuota{tenant: tenant, q: q, err: err, fetched: fetched})
}

// update replaces tenant's entry, if it is still cached, without marking
// it as used: a background reread must not bring back a tenant that was
// evicted meanwhile, nor evict another one for it.
func (c *quotaCache) update(tenant string, q Quota, err error, fetched time.Time) {
	if e, ok := c.m[tenant]; ok {
		*e.Value.(*cachedQuota) = cachedQuota{tenant: tenant, q: q, err: err, fetched: fetched}
	}
}

// remove forgets tenant's entry.
func (c *quotaCache) remove(tenant string) {
	if e, ok := c.m[tenant]; ok {
		c.ll.Remove(e)
		delete(c.m, tenant)
	}
}

// clear forgets every entry.
func (c *quotaCache) clear() {
	clear(c.m)
	c.ll.Init()
}

func (c *quotaCache) len() int { return c.ll.Len() }
