package metrics_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/metrics"
)

// TestAZeroMetricsObservesNothing: a zero or nil Metrics neither panics
// nor describes a series, and its middleware runs the handler as it is.
func TestAZeroMetricsObservesNothing(t *testing.T) {
	for name, m := range map[string]*metrics.Metrics{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			m.ObserveDecision(admission.Decision{Tenant: "acme", Outcome: admission.Admitted})
			m.ObserveDispatch(dispatch.QueueStats{Queue: "default", Tenants: []dispatch.TenantStats{{Tenant: "acme", Waiting: 1}}})
			ran := false
			h := m.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran = true; return nil }))
			if err := h.ProcessTask(t.Context(), asynq.NewTask("x", nil)); err != nil || !ran {
				t.Errorf("middleware: ran %v, %v", ran, err)
			}
			descs := make(chan *prometheus.Desc, 64)
			m.Describe(descs)
			close(descs)
			if n := len(descs); n != 0 {
				t.Errorf("%d series described", n)
			}
		})
	}
}

// TestADecisionWithoutAnOutcomeIsNotCounted: the zero Decision, which
// comes beside an error, makes no "none" series.
func TestADecisionWithoutAnOutcomeIsNotCounted(t *testing.T) {
	m := metrics.New()
	m.ObserveDecision(admission.Decision{Tenant: "acme"})
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == "none" {
					t.Errorf("%s has an outcome=\"none\" series", f.GetName())
				}
			}
		}
	}
}
