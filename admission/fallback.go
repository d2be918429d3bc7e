package admission

import (
	"sync"
	"time"
)

// localLimiter is the FailOpen fallback: an in-process sliding-window log
// per tenant that admits at most Limit/instances in any window, so that
// instances producers together stay near the quota while Redis is away.
// It only admits or rejects: without Redis there is no shared order in
// which to hand out future slots.
//
// Memory is bounded: a tenant holds at most its local limit of timestamps,
// and once maxTenants tenants are tracked, idle ones (nothing in their
// window) are evicted, then arbitrary ones.
type localLimiter struct {
	instances  int
	maxTenants int
	clock      func() time.Time // time.Now; tests set their own

	mu   sync.Mutex
	logs map[string]*localLog
}

type localLog struct {
	times  []time.Time   // admissions in the window, oldest first
	window time.Duration // of the quota last applied: evict judges idleness by it
}

func newLocalLimiter(instances int) *localLimiter {
	return &localLimiter{instances: max(instances, 1), maxTenants: 10_000, clock: time.Now, logs: make(map[string]*localLog)}
}

// limit is the share of q one producer may admit locally: at least one, so
// that fail-open never means fail-closed.
func (l *localLimiter) limit(q Quota) int { return max(q.Limit/l.instances, 1) }

// admit decides ids for tenant. now is when the caller began, but the
// decision is recorded at the limiter's clock, read under its lock: a caller
// that first waited out a Redis timeout would otherwise record an admission
// in the past, which leaves the window early and lets more than the local
// limit through in real time, and appends it out of order, which trim
// relies on. now only matters if it is later than the clock.
func (l *localLimiter) admit(tenant string, q Quota, ids []string, now time.Time) []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.clock(); t.After(now) {
		now = t
	}
	lg := l.logs[tenant]
	if lg == nil {
		l.evict(now)
		lg = &localLog{}
		l.logs[tenant] = lg
	}
	lg.window = q.Window
	lg.trim(now)
	if n := len(lg.times); n > 0 && lg.times[n-1].After(now) {
		now = lg.times[n-1] // keep the log in order should the clock step back
	}
	limit := l.limit(q)
	ds := make([]Decision, len(ids))
	for i, id := range ids {
		d := Decision{Tenant: tenant, ID: id, Now: now, At: now, Local: true}
		if len(lg.times) < limit {
			lg.times = append(lg.times, now)
			d.Remaining = limit - len(lg.times)
		} else {
			d.Outcome, d.ID = Rejected, ""
			d.At = lg.times[len(lg.times)-limit].Add(q.Window)
		}
		ds[i] = d
	}
	return ds
}

// trim drops the admissions that have left the window (now-window, now].
func (lg *localLog) trim(now time.Time) {
	cut := 0
	for cut < len(lg.times) && !lg.times[cut].After(now.Add(-lg.window)) {
		cut++
	}
	if cut > 0 {
		lg.times = append(lg.times[:0], lg.times[cut:]...)
	}
}

// idle reports whether lg has nothing left in its own window at now.
func (lg *localLog) idle(now time.Time) bool {
	return len(lg.times) == 0 || !lg.times[len(lg.times)-1].After(now.Add(-lg.window))
}

// evict makes room for one more tenant. Idle tenants go first: each is
// judged by its own window, since forgetting a log that still holds
// admissions would let its tenant exceed the local limit. Only when every
// tracked tenant is active do arbitrary ones go, which bounds memory at the
// price of that tenant's local accounting.
func (l *localLimiter) evict(now time.Time) {
	if len(l.logs) < l.maxTenants {
		return
	}
	for t, lg := range l.logs {
		if lg.idle(now) {
			delete(l.logs, t)
		}
	}
	for t := range l.logs {
		if len(l.logs) < l.maxTenants {
			break
		}
		delete(l.logs, t)
	}
}
