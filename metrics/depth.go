package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/admitq/admitq/admission"
)

// depthGauges are the capped tenants' shares of the worker queues.
type depthGauges struct {
	inFlight *prometheus.GaugeVec
	parked   *prometheus.GaugeVec
	oldest   *prometheus.GaugeVec
}

func newDepthGauges() depthGauges {
	return depthGauges{
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "admitq_tenant_in_flight",
			Help: "Permits a tenant capped by MaxInFlight holds: its tasks pending or running in the worker queues.",
		}, []string{"tenant"}),
		parked: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "admitq_tenant_parked",
			Help: "Tasks of a capped tenant parked, waiting for a permit.",
		}, []string{"tenant"}),
		oldest: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "admitq_tenant_oldest_parked_age_seconds",
			Help: "How long a capped tenant's oldest parked task has waited; 0 when none is parked.",
		}, []string{"tenant"}),
	}
}

func (g depthGauges) describe(ch chan<- *prometheus.Desc) {
	g.inFlight.Describe(ch)
	g.parked.Describe(ch)
	g.oldest.Describe(ch)
}

func (g depthGauges) collect(ch chan<- prometheus.Metric) {
	g.inFlight.Collect(ch)
	g.parked.Collect(ch)
	g.oldest.Collect(ch)
}

// ObserveDepth sets the in-flight and parked gauges of d's tenant. A
// worker with a Gate reports every capped tenant's Depth as it reconciles
// them (worker.Config.OnDepth), so the gauges are at most a reconcile
// interval old. Tenants past WithMaxTenants share the "other" series,
// which then shows the last of them observed.
func (m *Metrics) ObserveDepth(d admission.Depth) {
	tenant, _ := m.tenantLabel(d.Tenant, 0) // gauges: no series to start at zero
	m.depth.inFlight.WithLabelValues(tenant).Set(float64(d.InFlight))
	m.depth.parked.WithLabelValues(tenant).Set(float64(d.Parked))
	age := 0.0
	if !d.OldestParked.IsZero() {
		age = max(d.Now.Sub(d.OldestParked).Seconds(), 0)
	}
	m.depth.oldest.WithLabelValues(tenant).Set(age)
}
