package admission

import (
	"context"
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// localLimiter is the FailOpen fallback: a per-tenant counter of this
// producer's admissions that admits at most Limit/instances in any window
// while Redis is away, so that instances producers together stay near the
// quota. It only admits or rejects: without Redis there is no shared order
// in which to hand out future slots.
//
// It also counts what this producer took from Redis, and what Redis last
// said of the tenant's window (observe), so that the fallback does not
// hand out again, on top of the slots Redis already gave, the share those
// slots used. After an outage it tells Redis what it admitted (replay),
// and for two windows after its last fallback admission for a tenant it
// sends Redis only what the tenant's local count has room for (guard):
// producers come back at different times, and Redis cannot see what the
// others still admit locally.
//
// Memory per tenant is constant: a tenant is localBuckets+1 counters, like
// Counter mode, whatever its limit (about 200 bytes with its map entry,
// plus the name). At most maxTenants tenants are tracked. Tenants are kept
// in the order of their last admission, so the one evicted to make room is
// the least recently admitted, in O(1): first an idle one (nothing counted
// any more); else one only observed on Redis, which loses no fallback
// admission; never one with fallback admissions in its window, since
// forgetting those would let it exceed its share. When all are such, the
// fallback rejects a tenant it is not tracking yet (At: when the least
// recently admitted one frees), and does not count Redis admissions of
// tenants it cannot track.
type localLimiter struct {
	instances  int
	maxTenants int // in all shards together
	clock      func() time.Time
	seed       maphash.Seed
	shards     [localShards]localShard
}

// localBuckets is how many buckets a window is cut into. A window of any
// length W at any time is covered by localBuckets+1 whole buckets; counting
// them all never admits more than the limit in a window, and admits less
// by at most one bucket's worth of time (W/10).
const localBuckets = 10

// localShards spreads tenants over locks, so that a flood of decisions on
// many tenants does not queue on one mutex.
const localShards = 16

// defaultLocalTenants is how many tenants the fallback tracks at most:
// at most localTenantBytes each, under 26 MB, names aside.
const defaultLocalTenants = 100_000

// localTenantBytes bounds the memory of one tracked tenant, its name
// aside: its counter (128 bytes) and its share of the map.
const localTenantBytes = 256

type localShard struct {
	mu    sync.Mutex
	m     map[string]*localCount
	local localList // tenants with fallback admissions in their window
	seen  localList // tenants only observed on Redis
}

// localCount is one tenant's counter.
type localCount struct {
	tenant     string
	prev, next *localCount
	list       *localList

	window time.Duration // of the quota last applied
	width  int64         // ns per bucket
	newest int64         // index of the newest bucket, time/width
	counts [localBuckets + 1]int32
	// fullUntil (UnixNano) is when Redis last said the window is full
	// until: a slot it deferred, or the next free slot of a rejection.
	fullUntil int64
	// localUntil (UnixNano) is a window after the fallback's last
	// admission stops being counted; until then the tenant is guarded.
	localUntil int64
	// Until seedUntil (UnixNano), a window after the last admission Redis
	// gave this producer, the fallback admits only while seed < the local
	// limit: seed starts at the share of the limit that Redis said the
	// tenant had used, in all producers, and counts fallback admissions.
	seed      int32
	seedUntil int64
	// debt is how many fallback admissions Redis has not been told of yet,
	// of those counted until debtUntil (UnixNano); see Gate.replay.
	debt      int32
	debtUntil int64
}

// localList is a doubly linked list of tenants, most recently admitted
// first.
type localList struct {
	head, tail *localCount
}

func (ls *localList) pushFront(c *localCount) {
	c.list, c.prev, c.next = ls, nil, ls.head
	if ls.head != nil {
		ls.head.prev = c
	}
	ls.head = c
	if ls.tail == nil {
		ls.tail = c
	}
}

func (ls *localList) remove(c *localCount) {
	if c.prev != nil {
		c.prev.next = c.next
	} else {
		ls.head = c.next
	}
	if c.next != nil {
		c.next.prev = c.prev
	} else {
		ls.tail = c.prev
	}
	c.prev, c.next, c.list = nil, nil, nil
}

func newLocalLimiter(instances int) *localLimiter {
	l := &localLimiter{instances: max(instances, 1), maxTenants: defaultLocalTenants, clock: time.Now, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].m = make(map[string]*localCount)
	}
	return l
}

// limit is the share of q one producer may admit locally: at least one, so
// that fail-open never means fail-closed.
func (l *localLimiter) limit(q Quota) int32 {
	return int32(min(max(q.Limit/l.instances, 1), math.MaxInt32))
}

// share returns what used of q's Limit, taken in all producers, is of
// this producer's local limit, rounded up.
func (l *localLimiter) share(q Quota, used int) int32 {
	u, limit := int64(min(max(used, 0), q.Limit)), int64(l.limit(q))
	if u > math.MaxInt64/limit-int64(q.Limit) { // no room to multiply: a little more, never less
		return int32(min(math.Ceil(float64(u)/float64(q.Limit)*float64(limit))+1, float64(limit)))
	}
	return int32((u*limit + int64(q.Limit) - 1) / int64(q.Limit))
}

func (l *localLimiter) shard(tenant string) *localShard {
	return &l.shards[stripe(l.seed, tenant, localShards)]
}

// now returns the limiter's clock, or at if that is later. Decisions are
// counted at the clock's time, read under the shard's lock: a caller that
// first waited out a Redis timeout would otherwise count an admission in
// the past, which leaves the window early.
func (l *localLimiter) now(at time.Time) time.Time {
	if t := l.clock(); t.After(at) {
		return t
	}
	return at
}

// admit decides ids for tenant without Redis. now is when the caller
// began.
func (l *localLimiter) admit(tenant string, q Quota, ids []string, now time.Time) []Decision {
	s := l.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	now = l.now(now)
	c, blocked := s.get(l, tenant, now, true)
	limit := l.limit(q)
	ds := make([]Decision, len(ids))
	for i, id := range ids {
		d := Decision{Tenant: tenant, Outcome: Admitted, ID: id, Now: now, At: now, Local: true}
		switch {
		case c == nil:
			d.Outcome, d.ID, d.At = Rejected, "", blocked
		case now.UnixNano() < c.fullUntil:
			d.Outcome, d.ID, d.At = Rejected, "", time.Unix(0, c.fullUntil)
		case now.UnixNano() < c.seedUntil && c.seed >= limit:
			d.Outcome, d.ID, d.At = Rejected, "", time.Unix(0, c.seedUntil)
		default:
			n := c.count(q, now)
			if n >= limit {
				d.Outcome, d.ID, d.At = Rejected, "", c.frees(now)
				break
			}
			c.add()
			if now.UnixNano() < c.seedUntil {
				c.seed++
			}
			if now.UnixNano() >= c.debtUntil {
				c.debt = 0
			}
			c.debt++
			c.debtUntil = (c.newest + localBuckets + 1) * c.width
			// Guarded until a window after this admission stops counting:
			// producers come back to Redis at different times, and Redis
			// cannot see what the others still admit locally.
			c.localUntil = c.debtUntil + int64(q.Window)
			s.touch(c, &s.local)
			d.Remaining = int(limit - max(n, c.seed-1) - 1)
		}
		ds[i] = d
	}
	return ds
}

// observe counts what Redis decided for tenant (ds, none Local), as of
// now, the local time the reply came: admissions, and the time until
// which a deferral or a rejection says the window is full.
func (l *localLimiter) observe(tenant string, q Quota, ds []Decision, now time.Time) {
	s := l.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	now = l.now(now)
	c, _ := s.get(l, tenant, now, false)
	if c == nil {
		return
	}
	c.count(q, now) // rolls the buckets, and takes q's window
	for _, d := range ds {
		var full time.Time
		switch d.Outcome {
		case Admitted:
			if !d.Existing {
				c.add()
			}
			// The tenant's use in all producers, for a window.
			c.seed = l.share(q, q.Limit-d.Remaining)
			c.seedUntil = now.Add(q.Window).UnixNano()
			continue
		case Deferred:
			full = d.At
		case Rejected:
			full = d.At.Add(q.MaxDelay) // the next free slot
		}
		// Full until that slot, and from then on one slot free of Limit
		// for a window, as far as this producer knows.
		until := now.Add(full.Sub(d.Now))
		c.fullUntil = max(c.fullUntil, until.UnixNano())
		c.seed = l.share(q, q.Limit-1)
		c.seedUntil = max(c.seedUntil, until.Add(q.Window).UnixNano())
	}
	list := &s.seen
	if c.list == &s.local {
		list = &s.local
	}
	s.touch(c, list)
}

// guard returns how many of n requests of tenant may go to Redis now, and
// when the rest could be admitted: all of them, unless the fallback
// admitted for the tenant within the window, in which case those count,
// since Redis never saw them, until they leave the window. debt is how
// many of those Redis has not been told of (see Gate.replay).
func (l *localLimiter) guard(tenant string, q Quota, n int, now time.Time) (ok int, at time.Time, debt int) {
	s := l.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	now = l.now(now)
	c := s.m[tenant]
	if c == nil || now.UnixNano() >= c.localUntil {
		return n, time.Time{}, 0
	}
	if now.UnixNano() < c.debtUntil {
		debt = int(c.debt)
	}
	// Not fullUntil: that is Redis's word, and Redis, back, says it anew
	// (it may have come back empty).
	room := int(l.limit(q) - c.count(q, now))
	if room >= n {
		return n, time.Time{}, debt
	}
	return max(room, 0), c.frees(now), debt
}

// replayed notes that Redis has been told of n of tenant's fallback
// admissions.
func (l *localLimiter) replayed(tenant string, n int) {
	s := l.shard(tenant)
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.m[tenant]; c != nil {
		c.debt = max(c.debt-int32(min(n, math.MaxInt32)), 0)
	}
}

// replay tells Redis of n admissions the fallback made for a's tenant that
// are still in their window: each takes a slot now, where there is room,
// so that producers that stayed on Redis, or came back first, do not hand
// those slots out again. Now, not when they happened, which keeps them
// counted longer, never shorter. With no room they are only forgotten:
// they ran already, and a deferred slot would only delay the tenant's
// next work. A call that fails leaves them for the next one.
func (g *Gate) replay(ctx context.Context, a *ask, n int, budget time.Duration) {
	back := ask{tenant: a.tenant, key: a.key, master: a.master, q: a.q, gran: a.gran, ids: make([]string, n), fresh: true}
	back.q.MaxDelay = 0
	for i := range back.ids {
		back.ids[i] = g.ids.next(logBound(a.q))
	}
	if _, _, err := g.remote(ctx, &back, budget); err == nil {
		g.local.replayed(a.tenant, n)
	}
}

// get returns tenant's counter, making one if there is none and there is
// room, or can be made (see localLimiter). With no room it returns nil and,
// for the fallback, when the least recently admitted tenant will be idle.
func (s *localShard) get(l *localLimiter, tenant string, now time.Time, fallback bool) (*localCount, time.Time) {
	if c := s.m[tenant]; c != nil {
		return c, time.Time{}
	}
	if len(s.m) >= max(l.maxTenants/localShards, 1) {
		ns := now.UnixNano()
		switch {
		case s.seen.tail != nil && s.seen.tail.idle(ns):
			s.evict(s.seen.tail)
		case s.local.tail != nil && s.local.tail.idle(ns):
			s.evict(s.local.tail)
		case s.seen.tail != nil:
			s.evict(s.seen.tail) // loses what it took from Redis, not a fallback admission
		default: // every tenant tracked has fallback admissions in its window
			if !fallback {
				return nil, time.Time{}
			}
			return nil, time.Unix(0, s.local.tail.idleAt())
		}
	}
	c := &localCount{tenant: tenant}
	s.m[tenant] = c
	s.seen.pushFront(c)
	return c, time.Time{}
}

func (s *localShard) evict(c *localCount) {
	c.list.remove(c)
	delete(s.m, c.tenant)
}

// touch makes c the most recently admitted tenant of list.
func (s *localShard) touch(c *localCount, list *localList) {
	if c.list != nil {
		c.list.remove(c)
	}
	list.pushFront(c)
}

// count rolls c's buckets forward to now and returns what they hold. A
// change of window folds the count into the current bucket, which keeps it
// counted for a whole new window: later than its time, never earlier.
func (c *localCount) count(q Quota, now time.Time) int32 {
	if q.Window != c.window {
		total := c.sum()
		c.window = q.Window
		c.width = max(int64(q.Window)/localBuckets, 1)
		c.counts = [localBuckets + 1]int32{}
		c.newest = now.UnixNano() / c.width
		c.counts[c.newest%(localBuckets+1)] = total
		return total
	}
	cur := now.UnixNano() / c.width
	if cur <= c.newest {
		return c.sum() // the same bucket, or the clock stepped back: count as of the newest
	}
	if cur-c.newest > localBuckets {
		c.counts = [localBuckets + 1]int32{}
	} else {
		for b := c.newest + 1; b <= cur; b++ {
			c.counts[b%(localBuckets+1)] = 0
		}
	}
	c.newest = cur
	return c.sum()
}

func (c *localCount) sum() int32 {
	var n int32
	for _, v := range c.counts {
		n += v
	}
	return n
}

// add counts one admission in the newest bucket; count must have rolled
// the buckets to now first.
func (c *localCount) add() {
	if i := c.newest % (localBuckets + 1); c.counts[i] < math.MaxInt32 {
		c.counts[i]++
	}
}

// frees returns when the oldest counted bucket stops counting, which
// makes room for at least one admission.
func (c *localCount) frees(now time.Time) time.Time {
	for b := c.newest - localBuckets; b <= c.newest; b++ {
		if c.counts[b%(localBuckets+1)] > 0 {
			return time.Unix(0, (b+localBuckets+1)*c.width)
		}
	}
	return now
}

// idleAt returns when c counts nothing any more and Redis's last word on
// it has passed.
func (c *localCount) idleAt() int64 {
	at := c.fullUntil
	if c.width > 0 && c.sum() > 0 {
		at = max(at, (c.newest+localBuckets+1)*c.width)
	}
	return at
}

func (c *localCount) idle(now int64) bool { return now >= c.idleAt() }

// rejectAll rejects ids locally until at.
func rejectAll(tenant string, ids []string, now, at time.Time) []Decision {
	ds := make([]Decision, len(ids))
	for i := range ds {
		ds[i] = Decision{Tenant: tenant, Outcome: Rejected, Now: now, At: at, Local: true}
	}
	return ds
}

// tracked returns how many tenants the limiter holds.
func (l *localLimiter) tracked() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
