package admission

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// denyCache remembers tenants whose every new request Redis will reject
// until a known time: the retry hint admit.lua returns with a rejection,
// and with the admission that fills the window. Until then the gate
// answers locally (slots only move forward), so a flood from one tenant
// costs Redis about one script call per admission. An entry holds for the
// quota and granularity it was made under; a Release through this gate,
// or a slot given back for a caller that left, ends it.
//
// Once the time passes, the first request to find it so goes to Redis as
// the probe; requests that arrive during its round trip wait for its
// answer rather than race it to Redis, where they would only be rejected.
// A window frees slots one or a few at a time, so an answer that leaves a
// tenant fewer than nearFull free slots paces its next requests: as many
// go to Redis as the answer left room for, then one goes as the probe
// while the others wait. A request waits only while one of its tenant's is
// at Redis, and no longer than the gate's timeout; what an answer said
// stops counting a window after it came.
//
// A Release frees a slot that a call already in flight may not have seen,
// whose reply could then cache a rejection that no longer holds. So forget
// moves the tenant's generation on, and put drops a rejection from a call
// that began in an older one. Generations are kept for 64 stripes of
// tenants rather than for each: bounded, and a Release costs the other
// tenants of its stripe at most a cached rejection now and then.
//
// A nil *denyCache is a cache that is off: it holds nothing.
type denyCache struct {
	max  int
	wait time.Duration     // longest a request waits for a probe's answer
	gens [64]atomic.Uint64 // by stripe of tenant; moved on by forget, under mu
	seed maphash.Seed      // of the stripes

	mu      sync.RWMutex
	entries map[string]denial
}

// denyKey is what a cached answer speaks for.
type denyKey struct {
	tenant string
	q      Quota
	gran   int64
}

// A denial is a rejection of every new request of a tenant until a time;
// once that has passed, or for a tenant Redis found near full (until is
// zero), it paces the tenant's requests to Redis.
type denial struct {
	q     Quota
	gran  int64     // the granularity the hint was computed at
	until time.Time // local clock
	now   time.Time // Redis time of the reply that told it
	at    time.Time // Redis time a retry could succeed
	told  time.Time // local time of the answer that made or last paced it

	// Pacing, once until has passed: room requests may still go as they
	// come; then the probe's answer closes probe, and the requests waiting
	// for it stop waiting at probeBy in any case.
	room     int
	inflight int // requests that went while paced, for all this gate knows not yet answered
	probe    chan struct{}
	probeBy  time.Time
}

// nearFull is the room below which a tenant's requests are paced: see
// denyCache.
const nearFull = 8

// trimEvery is admit.lua's TRIM: the script trims a log once every
// trimEvery entries, or near its limit, so that Decision.Remaining is exact
// below nearFull, where the cache paces a tenant.
const trimEvery = nearFull

// newDenyCache returns a cache of up to max tenants whose requests wait
// up to wait for a probe.
func newDenyCache(max int, wait time.Duration) *denyCache {
	return &denyCache{max: max, wait: wait, seed: maphash.MakeSeed(), entries: make(map[string]denial)}
}

// lookup returns the rejection that holds for k at the local time now, if
// any, and how long it waited. When one has just run out and another
// request is at Redis for it, lookup waits for that one's answer (or ctx)
// and looks again; without wait it answers none then, and the caller goes
// to Redis (AdmitBatches, whose own asks may be the probe, not yet sent). A hint holds only at the granularity it was computed
// at, since rounding moves the slot a request could get (see
// Gate.AtGranularity).
func (c *denyCache) lookup(ctx context.Context, k denyKey, now time.Time, wait bool) (denial, bool, time.Duration) {
	if c == nil {
		return denial{}, false, 0
	}
	start := now
	for {
		c.mu.RLock()
		d, ok := c.entries[k.tenant]
		c.mu.RUnlock()
		if !ok || d.q != k.q || d.gran != k.gran || now.Sub(d.told) > k.q.Window {
			return denial{}, false, now.Sub(start)
		}
		if now.Before(d.until) {
			return d, true, now.Sub(start)
		}
		probe, by := c.pace(k.tenant, now)
		if probe == nil {
			return denial{}, false, now.Sub(start) // this request goes
		}
		if !wait || !await(ctx, probe, by.Sub(now)) {
			return denial{}, false, time.Since(start)
		}
		now = time.Now()
	}
}

// pace is lookup's step for a tenant whose rejection has run out, or
// who is near full: it returns nil when the caller is to go to Redis, in
// the room the last answer left or as the probe (there being no answer on
// its way, or it being overdue); otherwise the probe, the next answer, to
// wait for, and when to stop waiting.
func (c *denyCache) pace(tenant string, now time.Time) (chan struct{}, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.entries[tenant]
	if !ok || now.Before(d.until) {
		return closed, now // changed meanwhile: look again
	}
	if d.room == 0 && d.probe != nil && now.Before(d.probeBy) {
		return d.probe, d.probeBy
	}
	if d.room > 0 {
		d.room--
	}
	d.inflight++
	if d.probe == nil || !now.Before(d.probeBy) {
		// The next answer, this request's or that of one already on its
		// way, is what the waiters wait for.
		d.probe, d.probeBy = make(chan struct{}), now.Add(c.wait)
	}
	c.entries[tenant] = d
	return nil, time.Time{}
}

// closed is a probe that has answered.
var closed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// await waits up to d for probe to answer, and reports whether it may
// look again: false when ctx ended first.
func await(ctx context.Context, probe <-chan struct{}, d time.Duration) bool {
	select {
	case <-probe:
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-probe:
		return true
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// generation returns tenant's current generation, for a call about to go
// to Redis to hand to put.
func (c *denyCache) generation(tenant string) uint64 {
	if c == nil {
		return 0
	}
	return c.gen(tenant).Load()
}

// gen returns the generation of tenant's stripe.
func (c *denyCache) gen(tenant string) *atomic.Uint64 {
	return &c.gens[stripe(c.seed, tenant, len(c.gens))]
}

// put records what a call that went to Redis for k learned: its
// decisions ds (nil when it got no answer) and the retry hint, the time
// until which Redis will reject every new request of k's tenant (zero for
// none), unless the call began before the generation gen ended. now is
// the local time the reply arrived. Every call that went to Redis ends
// with a put, which ends its probe if it was one (see denyCache).
//
// The hint is mapped to the local clock from the reply's arrival, a
// one-way trip after the script ran; a request sent at the hint's local
// time would reach Redis a one-way trip later too. So the cache stops
// answering about when Redis starts admitting: late by at most the
// difference between the two trips and the delivery of the reply, well
// under a round trip. (Mapping from the send time instead would send
// requests early, and each would cost a script call Redis only rejects.)
func (c *denyCache) put(k denyKey, ds []Decision, hint, now time.Time, gen uint64) {
	if c == nil {
		return
	}
	if hint.IsZero() {
		c.room(k, ds, now)
		return
	}
	serverNow := ds[0].Now
	d := denial{q: k.q, gran: k.gran, until: now.Add(hint.Sub(serverNow)), now: serverNow, at: hint, told: now}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen(k.tenant).Load() != gen {
		return // a Release may have freed a slot the call did not see; forget woke the waiters
	}
	if len(c.entries) >= c.max {
		for t, e := range c.entries {
			if !now.Before(e.until) {
				c.drop(t, e)
			}
		}
		if len(c.entries) >= c.max {
			for t, e := range c.entries { // forgetting a rejection costs a script call, never correctness
				c.drop(t, e)
			}
		}
	}
	c.set(k.tenant, d)
}

// set stores d as tenant's entry, waking the requests waiting for the
// probe of the one it replaces. c.mu must be held.
func (c *denyCache) set(tenant string, d denial) {
	if old, ok := c.entries[tenant]; ok && old.probe != nil {
		close(old.probe)
	}
	c.entries[tenant] = d
}

// room records an answer ds for k that holds no rejection to cache:
// the room it left paces the tenant's next requests when it is short, and
// ends any pacing when it is not, or is unknown (the call got no answer,
// or its last request was not admitted now). Either way the requests
// waiting for the probe look again. The common path, a tenant with room
// and no entry, takes no write lock.
func (c *denyCache) room(k denyKey, ds []Decision, now time.Time) {
	tenant := k.tenant
	room := nearFull // unknown: a deferral or an older ID's slot says nothing of the room now
	if len(ds) > 0 && ds[len(ds)-1].Outcome == Admitted {
		room = ds[len(ds)-1].Remaining
	}
	c.mu.RLock()
	d, ok := c.entries[tenant]
	c.mu.RUnlock()
	if ok && now.Before(d.until) || !ok && room >= nearFull {
		return // a rejection stands, or nothing to pace
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok = c.entries[tenant]
	inflight := 0
	if ok && d.inflight > 0 {
		// This answer's request is one of them, or went before them:
		// either way the others may take the room it saw.
		inflight = d.inflight - 1
		room = max(0, room-inflight)
	}
	switch {
	case ok && now.Before(d.until):
	case room >= nearFull:
		if ok {
			c.drop(tenant, d)
		}
	case !ok && len(c.entries) >= c.max:
		// Pacing is only an economy: no room for it.
	default:
		c.set(tenant, denial{q: k.q, gran: k.gran, told: now, room: room, inflight: inflight})
	}
}

// forget drops tenant's rejection, and any that calls now in flight would
// bring back.
func (c *denyCache) forget(tenant string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if d, ok := c.entries[tenant]; ok {
		c.drop(tenant, d)
	}
	c.gen(tenant).Add(1)
	c.mu.Unlock()
}

// drop deletes tenant's denial d, waking the requests waiting for its
// probe. c.mu must be held.
func (c *denyCache) drop(tenant string, d denial) {
	if d.probe != nil {
		close(d.probe)
	}
	delete(c.entries, tenant)
}

// decisions answers ids from d: all rejected, Now moved on by the time
// that passed locally since Redis decided.
func (d denial) decisions(tenant string, ids []string, now time.Time) []Decision {
	elapsed := now.Sub(d.until.Add(-d.at.Sub(d.now)))
	return rejectAll(tenant, ids, d.now.Add(elapsed), d.at)
}
