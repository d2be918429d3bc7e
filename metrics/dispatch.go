package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/admitq/admitq/dispatch"
)

// depthGauges are each tenant's part of the dispatched worker queues.
type depthGauges struct {
	inFlight *prometheus.GaugeVec
	parked   *prometheus.GaugeVec
	oldest   *prometheus.GaugeVec
	worker   *prometheus.GaugeVec
	share    *prometheus.GaugeVec
	weight   *prometheus.GaugeVec
	paused   *prometheus.GaugeVec
	held     *prometheus.GaugeVec
}

func newDepthGauges() depthGauges {
	vec := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"queue", "tenant"})
	}
	return depthGauges{
		inFlight: vec("admitq_tenant_in_flight", "Tasks of a tenant that the dispatcher let into a queue and asynq still holds (pending, active or to be retried)."),
		parked:   vec("admitq_tenant_parked", "Tasks of a tenant parked in a dispatched queue, waiting their turn."),
		oldest:   vec("admitq_tenant_oldest_parked_age_seconds", "How long a tenant's oldest parked task has waited; 0 when none is parked."),
		worker:   vec("admitq_tenant_worker_seconds", "Worker time a tenant's tasks ran in a dispatched queue since the tenant was last idle."),
		share:    vec("admitq_tenant_worker_share", "A tenant's share of the worker time of the tenants active in a dispatched queue, 0 to 1."),
		weight:   vec("admitq_tenant_weight", "A tenant's weight in a fair queue (Quota.Weight, 0 read as 1)."),
		paused:   vec("admitq_tenant_paused", "1 while Quota.Paused holds a tenant's parked tasks in a dispatched queue."),
		held:     vec("admitq_tenant_held", "1 while a tenant's parked tasks are held back for a while, by its rate or a downstream throttle (worker.Throttled)."),
	}
}

func (g depthGauges) all() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{g.inFlight, g.parked, g.oldest, g.worker, g.share, g.weight, g.paused, g.held}
}

// gauges are every dispatch gauge: the tenants' and the keys'.
func (m *Metrics) gauges() []*prometheus.GaugeVec {
	return append(m.depth.all(), m.keys.all()...)
}

// keyGauges are each concurrency key's part of the dispatched worker
// queues. Keys have no label mapping of their own: Stats lists at most
// dispatch.StatsKeys of a queue's keys, and a key no longer listed loses its
// series, so a queue holds at most that many series of each.
type keyGauges struct {
	inFlight *prometheus.GaugeVec
	waiting  *prometheus.GaugeVec
	paused   *prometheus.GaugeVec
	held     *prometheus.GaugeVec
}

func newKeyGauges() keyGauges {
	vec := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"queue", "key"})
	}
	return keyGauges{
		inFlight: vec("admitq_key_in_flight", "Tasks carrying a concurrency key that the dispatcher let into a queue and asynq still holds, across all tenants."),
		waiting:  vec("admitq_key_waiting", "Tasks carrying a concurrency key that wait their turn in a dispatched queue."),
		paused:   vec("admitq_key_paused", "1 while the key's Quota.Paused holds its tasks in a dispatched queue."),
		held:     vec("admitq_key_held", "1 while a downstream throttle (worker.ThrottledKey) holds a key's tasks in a dispatched queue."),
	}
}

func (g keyGauges) all() []*prometheus.GaugeVec {
	return []*prometheus.GaugeVec{g.inFlight, g.waiting, g.paused, g.held}
}

// tenantSum is what the tenants that share one label hold: their tasks
// in flight and parked, worker time and share added up; the oldest of
// their parked tasks' ages, the largest of their weights; and whether any
// of them is paused or held.
type tenantSum struct {
	inFlight, parked, oldest, worker, share, weight, paused, held float64
}

// add adds tenant t's part, as of now.
func (s *tenantSum) add(t dispatch.TenantStats, now time.Time) {
	s.inFlight += float64(t.InFlight)
	s.parked += float64(t.Waiting)
	if !t.OldestWaiting.IsZero() {
		s.oldest = max(s.oldest, now.Sub(t.OldestWaiting).Seconds())
	}
	s.worker += t.WorkerTime.Seconds()
	s.share += t.Share
	s.weight = max(s.weight, t.Weight)
	s.paused = max(s.paused, gauge(t.Paused))
	s.held = max(s.held, gauge(t.Held))
}

// gauge is b as a 0/1 gauge value.
func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ObserveDispatch sets the dispatch gauges of qs's queue to what qs holds:
// each active tenant's tasks in flight and parked, its worker time, share
// and weight, and whether it is paused or held back; each listed
// concurrency key's tasks in flight and waiting, and whether it is paused or
// held. A tenant or key no longer listed there loses its series. A worker
// with a Gate reports each of its queues every couple of seconds
// (worker.Config.OnDispatch). Tenants that share a series (one label of
// WithTenantLabel, or the "other" series past WithMaxTenants) add up: their
// tasks in flight and parked, worker time and share are summed, the
// oldest parked age and the weight are the largest of theirs, and paused
// and held are 1 when any of them is.
func (m *Metrics) ObserveDispatch(qs dispatch.QueueStats) {
	if !m.made() {
		return
	}
	for _, v := range m.gauges() {
		v.DeletePartialMatch(prometheus.Labels{"queue": qs.Queue})
	}
	labels := map[string]*tenantSum{}
	var order []string
	for _, t := range qs.Tenants {
		tenant, _ := m.tenantLabel(t.Tenant, 0) // gauges: no series to start at zero
		sum := labels[tenant]
		if sum == nil {
			sum = &tenantSum{}
			labels[tenant] = sum
			order = append(order, tenant)
		}
		sum.add(t, qs.Now)
	}
	for _, tenant := range order {
		sum, g := labels[tenant], m.depth
		g.inFlight.WithLabelValues(qs.Queue, tenant).Set(sum.inFlight)
		g.parked.WithLabelValues(qs.Queue, tenant).Set(sum.parked)
		g.oldest.WithLabelValues(qs.Queue, tenant).Set(sum.oldest)
		g.worker.WithLabelValues(qs.Queue, tenant).Set(sum.worker)
		g.share.WithLabelValues(qs.Queue, tenant).Set(sum.share)
		g.weight.WithLabelValues(qs.Queue, tenant).Set(sum.weight)
		g.paused.WithLabelValues(qs.Queue, tenant).Set(sum.paused)
		g.held.WithLabelValues(qs.Queue, tenant).Set(sum.held)
	}
	keys := qs.Keys[:min(len(qs.Keys), dispatch.StatsKeys)] // Stats's bound, whoever built qs
	for _, k := range keys {
		g := m.keys
		g.inFlight.WithLabelValues(qs.Queue, k.Key).Set(float64(k.InFlight))
		g.waiting.WithLabelValues(qs.Queue, k.Key).Set(float64(k.Waiting))
		g.paused.WithLabelValues(qs.Queue, k.Key).Set(gauge(k.Paused))
		g.held.WithLabelValues(qs.Queue, k.Key).Set(gauge(k.Held))
	}
}
