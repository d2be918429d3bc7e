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

	mu   sync.Mutex
	logs map[string]*localLog
}

type localLog struct {
	times []time.Time // admissions in the window, oldest first
}

func newLocalLimiter(instances int) *localLimiter {
	return &localLimiter{instances: max(instances, 1), maxTenants: 10_000, logs: make(map[string]*localLog)}
}

// limit is the share of q one producer may admit locally: at least one, so
// that fail-open never means fail-closed.
func (l *localLimiter) limit(q Quota) int { return max(q.Limit/l.instances, 1) }

func (l *localLimiter) admit(tenant string, q Quota, ids []string, now time.Time) []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	lg := l.logs[tenant]
	if lg == nil {
		l.evict(now, q.Window)
		lg = &localLog{}
		l.logs[tenant] = lg
	}
	lg.trim(now, q.Window)
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

func (lg *localLog) trim(now time.Time, window time.Duration) {
	cut := 0
	for cut < len(lg.times) && !lg.times[cut].After(now.Add(-window)) {
		cut++
	}
	if cut > 0 {
		lg.times = append(lg.times[:0], lg.times[cut:]...)
	}
}

// evict makes room for one more tenant. Idle tenants go first; a log's
// times are its own window's, so an empty trimmed log has nothing to lose.
func (l *localLimiter) evict(now time.Time, window time.Duration) {
	if len(l.logs) < l.maxTenants {
		return
	}
	for t, lg := range l.logs {
		if len(lg.times) == 0 || !lg.times[len(lg.times)-1].After(now.Add(-window)) {
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
