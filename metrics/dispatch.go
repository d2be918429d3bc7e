package metrics

import (
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

func (g depthGauges) describe(ch chan<- *prometheus.Desc) {
	for _, v := range g.all() {
		v.Describe(ch)
	}
}

func (g depthGauges) collect(ch chan<- prometheus.Metric) {
	for _, v := range g.all() {
		v.Collect(ch)
	}
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
// and weight, and whether it is paused or held back. A tenant no longer active there loses its series. A worker
// with a Gate reports each of its queues every couple of seconds
// (worker.Config.OnDispatch). Tenants past WithMaxTenants share the
// "other" series, which then shows the last of them observed.
func (m *Metrics) ObserveDispatch(qs dispatch.QueueStats) {
	for _, v := range m.depth.all() {
		v.DeletePartialMatch(prometheus.Labels{"queue": qs.Queue})
	}
	for _, t := range qs.Tenants {
		tenant, _ := m.tenantLabel(t.Tenant, 0) // gauges: no series to start at zero
		g := m.depth
		g.inFlight.WithLabelValues(qs.Queue, tenant).Set(float64(t.InFlight))
		g.parked.WithLabelValues(qs.Queue, tenant).Set(float64(t.Waiting))
		age := 0.0
		if !t.OldestWaiting.IsZero() {
			age = max(qs.Now.Sub(t.OldestWaiting).Seconds(), 0)
		}
		g.oldest.WithLabelValues(qs.Queue, tenant).Set(age)
		g.worker.WithLabelValues(qs.Queue, tenant).Set(t.WorkerTime.Seconds())
		g.share.WithLabelValues(qs.Queue, tenant).Set(t.Share)
		g.weight.WithLabelValues(qs.Queue, tenant).Set(t.Weight)
		g.paused.WithLabelValues(qs.Queue, tenant).Set(gauge(t.Paused))
		g.held.WithLabelValues(qs.Queue, tenant).Set(gauge(t.Held))
	}
}
