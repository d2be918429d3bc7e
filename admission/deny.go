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
// entry holds for the quota and granularity it was made under (a request
// under another goes to Redis, and its reply replaces the entry); a
// Release through this gate, or a slot given back for a caller that left,
// ends it.
//
// It also keeps a tenant that Redis has rejected from sending Redis more
// calls at once than it has room for. A rejection's time, once passed,
// counts as room for one, and an admission that leaves the tenant little
// room (maxRoom free slots or fewer) records how many; more room, a
// deferral or a failed call ends the entry. Tenants never rejected have no
// entry, and cost the cache two read-locked lookups per decision. While as
// many calls of the tenant are out as it has room for, a new request waits
// for them to come back and looks again, instead of sending a call that
// Redis would only reject: the calls out take the free slots, and the last
// of them brings back the time until which the window is full. So when a
// flood's rejection runs out, one request probes Redis and the others wait
// for it; and when two or three slots free up at once, as many requests
// go. The room is a lower bound as of the reply that told it, since slots
// only free up as time passes. A request waits for the calls out when it
// began, and if others took the room they left, for those too, but no
// longer (see lookup), and never for more than half its deadline (see
// Gate.denied). An entry with no call out lapses one slot's share of the
// window (Window/Limit) after it was told its room, or after its rejection
// ran out, when another slot has likely freed.
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
	entries map[string]*denial
}

// maxRoom is the most free slots a room entry records: with more, a
// tenant's concurrent requests fit, and the gate does not count them.
const maxRoom = 8

// A denial is a tenant's entry: a rejection until a time, or, with until
// zero, the room it has. Entries are changed only under the cache's lock.
type denial struct {
	q     Quota
	gran  int64     // the granularity the hint was computed at
	until time.Time // local clock; zero for a room entry
	now   time.Time // Redis time of the rejection
	at    time.Time // Redis time a retry could succeed

	room    int           // calls that may be out at once (room entries)
	seen    time.Time     // Redis time of the reply that told the room
	lapses  time.Time     // local time a room entry stops holding
	out     int           // calls out, counted against room
	returns uint64        // calls that came back
	back    chan struct{} // closed, and replaced, when a call out comes back or the entry goes
}

func newDenyCache(max int) *denyCache {
	return &denyCache{max: max, entries: make(map[string]*denial)}
}

// lookup returns the rejection that still holds for tenant under q, or
// says how to go to Redis: when the tenant has room for another call out,
// it returns a ticket, which the caller must hand to returned once its call
// ends (after its put or room); when it has none, wait, which is closed
// when a call comes back, after which the caller should look again with
// the same w. A caller waits for the calls that were out when it began to
// wait; once as many calls have come back, if callers that waited beside
// it took the room they left, it waits for those calls too, and then goes
// uncounted if there is still no room. So waiting costs at most two calls'
// time, however long calls take. All are nil on a plain miss: the call
// goes, uncounted.
//
// A hint holds only at the granularity it was computed at: rounding moves
// the slot a request could get, so gates that share the cache at another
// granularity (Gate.AtGranularity) ask Redis instead.
func (c *denyCache) lookup(tenant string, q Quota, gran int64, now time.Time, w *waiter) (d denial, ok bool, ticket *denial, wait chan struct{}) {
	c.mu.RLock()
	e := c.entries[tenant]
	if e == nil || e.q != q || e.gran != gran {
		c.mu.RUnlock()
		return denial{}, false, nil, nil
	}
	if now.Before(e.until) {
		d = *e
		c.mu.RUnlock()
		return d, true, nil, nil
	}
	c.mu.RUnlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	e = c.entries[tenant]
	switch {
	case e == nil || e.q != q || e.gran != gran:
		return denial{}, false, nil, nil
	case now.Before(e.until): // a call brought a new time meanwhile
		return *e, true, nil, nil
	case !e.until.IsZero() && e.out == 0 && !now.Before(e.until.Add(slotShare(q))):
		c.remove(tenant, e) // it ran out long ago: more may have freed
		return denial{}, false, nil, nil
	case !e.until.IsZero(): // the rejection ran out: one slot has freed
		e.until, e.room, e.lapses, e.seen = time.Time{}, 1, now.Add(slotShare(q)), e.now
	case e.out == 0 && !now.Before(e.lapses):
		c.remove(tenant, e) // a stale room entry: more may have freed
		return denial{}, false, nil, nil
	}
	switch {
	case e.out < e.room:
		e.out++
		return denial{}, false, e, nil
	case w.entry != e: // begin to wait, or wait anew on an entry made since
		w.entry, w.until, w.rounds = e, e.returns+uint64(e.out), 1
	case e.returns < w.until: // wait on
	case w.rounds < maxWaits: // the calls it waited for are back, and others took their room
		w.until, w.rounds = e.returns+uint64(e.out), w.rounds+1
	default:
		return denial{}, false, nil, nil
	}
	return denial{}, false, nil, e.back
}

// maxWaits is how many rounds of calls a caller waits for room.
const maxWaits = 2

// waiter is what a caller waiting for room remembers between lookups.
type waiter struct {
	entry  *denial // the entry it waits on
	until  uint64  // its returns count once the calls it waits for are back
	rounds int     // rounds of calls waited for
}

// returned ends the call that lookup gave ticket to, once its reply is
// recorded: the calls waiting for room look again.
func (c *denyCache) returned(tenant string, ticket *denial) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries[tenant] != ticket {
		return // gone, and its waiters woken, with the entry
	}
	ticket.out--
	ticket.returns++
	c.wake(ticket)
}

// remove drops tenant's entry e and wakes its waiters. Under c.mu.
func (c *denyCache) remove(tenant string, e *denial) {
	delete(c.entries, tenant)
	close(e.back)
}

// entry returns tenant's entry for q at gran, for put: made anew, with no
// calls out, if there is none or it was for another quota. Under c.mu.
func (c *denyCache) entry(tenant string, q Quota, gran int64, now time.Time) *denial {
	e := c.entries[tenant]
	if e != nil && e.q == q && e.gran == gran {
		return e
	}
	if e != nil {
		c.remove(tenant, e)
	}
	if len(c.entries) >= c.max {
		for t, o := range c.entries {
			if o.out == 0 && !now.Before(o.until) && !now.Before(o.lapses) {
				c.remove(t, o)
			}
		}
		if len(c.entries) >= c.max {
			for t, o := range c.entries {
				c.remove(t, o) // forgetting costs a script call now and then, never correctness
			}
		}
	}
	e = &denial{q: q, gran: gran, back: make(chan struct{})}
	c.entries[tenant] = e
	return e
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
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gens[stripe(tenant)].Load() != gen {
		return // a Release may have freed a slot the call did not see
	}
	e := c.entry(tenant, q, gran, now)
	e.until, e.now, e.at = now.Add(at.Sub(serverNow)), serverNow, at
	e.room, e.lapses = 0, time.Time{}
	c.wake(e) // its waiters are answered now
}

// wake wakes e's waiters, to look again. Under c.mu.
func (c *denyCache) wake(e *denial) {
	close(e.back)
	e.back = make(chan struct{})
}

// room records that tenant had room for free more admissions under q at
// serverNow, the Redis time of the reply of a call that began in
// generation gen, as an admission reports (Decision.Remaining); free <= 0
// says nothing is known (a deferral, or a failed call). Much room, or none
// known, ends the entry: the tenant's calls go uncounted. A reply older
// than the one the entry holds, or than its rejection, changes nothing:
// admissions since may have taken the room it saw; of replies from one
// script call, which share their time, the least room holds.
func (c *denyCache) room(tenant string, q Quota, gran int64, free int, serverNow, now time.Time, gen uint64) {
	c.mu.RLock()
	e := c.entries[tenant]
	c.mu.RUnlock()
	if e == nil {
		return // the common case: a tenant never rejected lately
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e = c.entries[tenant]
	if e == nil || e.q != q || e.gran != gran {
		return
	}
	if free <= 0 || free > maxRoom || c.gens[stripe(tenant)].Load() != gen {
		if e.until.IsZero() {
			c.remove(tenant, e) // calls out come back to nothing, and go uncounted
		}
		return
	}
	seen := e.seen
	if !e.until.IsZero() {
		seen = e.now
	}
	switch {
	case !e.until.IsZero() && now.Before(e.until):
		return // a rejection holds
	case serverNow.Before(seen):
		return // an older reply
	case serverNow.Equal(seen) && e.until.IsZero():
		free = min(free, e.room) // the same script call
	}
	e.until, e.room, e.seen, e.lapses = time.Time{}, free, serverNow, now.Add(slotShare(q))
	c.wake(e) // there may be more room than its waiters saw
}

// slotShare is how long a room entry holds once no call is out: one slot's
// share of q's window, after which another slot has likely freed.
func slotShare(q Quota) time.Duration { return q.Window / time.Duration(q.Limit) }

// forget drops tenant's rejection, and any that calls now in flight would
// bring back.
func (c *denyCache) forget(tenant string) {
	c.mu.Lock()
	if e := c.entries[tenant]; e != nil {
		c.remove(tenant, e)
	}
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
