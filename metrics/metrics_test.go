package metrics

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/worker"
)

func task(tenant string, slot time.Time) *asynq.Task {
	h := map[string]string{enqueue.TenantHeader: tenant}
	if !slot.IsZero() {
		h[enqueue.SlotHeader] = strconv.FormatInt(slot.UnixMilli(), 10)
	}
	return asynq.NewTaskWithHeaders("email:send", nil, h)
}

func TestObserveDecisionCountsByTenantAndOutcome(t *testing.T) {
	m := New()
	for _, o := range []admission.Outcome{admission.Admitted, admission.Admitted, admission.Deferred} {
		m.ObserveDecision(admission.Decision{Tenant: "acme", Outcome: o})
	}
	m.ObserveDecision(admission.Decision{Tenant: "globex", Outcome: admission.Rejected})

	want := map[string]float64{
		`admitq_gate_decisions_total{outcome="admitted",tenant="acme"}`:   2,
		`admitq_gate_decisions_total{outcome="deferred",tenant="acme"}`:   1,
		`admitq_gate_decisions_total{outcome="rejected",tenant="acme"}`:   0,
		`admitq_gate_decisions_total{outcome="admitted",tenant="globex"}`: 0,
		`admitq_gate_decisions_total{outcome="deferred",tenant="globex"}`: 0,
		`admitq_gate_decisions_total{outcome="rejected",tenant="globex"}`: 1,
	}
	if diff := cmp.Diff(want, gather(t, m, "admitq_gate_decisions_total")); diff != "" {
		t.Errorf("decisions (-want,+got):\n%s", diff)
	}
}

func TestMiddlewareCountsRunsFailuresAndDelay(t *testing.T) {
	m := New()
	now := time.UnixMilli(1_780_000_000_000)
	m.now = func() time.Time { return now }
	fail := errors.New("boom")
	h := m.Middleware()(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		switch string(t.Payload()) {
		case "fail":
			return fail
		case "throttled":
			return worker.Throttled(time.Second)
		}
		return nil
	}))
	run := func(tk *asynq.Task, payload string) {
		tk = asynq.NewTaskWithHeaders(tk.Type(), []byte(payload), tk.Headers())
		_ = h.ProcessTask(context.Background(), tk)
	}
	run(task("acme", now.Add(-300*time.Millisecond)), "") // 0.3 s late
	run(task("acme", now.Add(-2*time.Second)), "fail")    // 2 s late, fails
	run(task("acme", now.Add(time.Second)), "throttled")  // early: counted as 0, throttled is no failure
	run(task("globex", time.Time{}), "")                  // no slot: no delay observed

	want := map[string]float64{
		`admitq_tasks_processed_total{tenant="acme"}`:     3,
		`admitq_tasks_processed_total{tenant="globex"}`:   1,
		`admitq_tasks_failed_total{tenant="acme"}`:        1,
		`admitq_tasks_failed_total{tenant="globex"}`:      0,
		`admitq_queue_delay_seconds_count{tenant="acme"}`: 3,
		`admitq_queue_delay_seconds_sum{tenant="acme"}`:   2.3,
	}
	got := gather(t, m, "admitq_tasks_processed_total", "admitq_tasks_failed_total", "admitq_queue_delay_seconds")
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("task series (-want,+got):\n%s", diff)
	}
}

func TestMiddlewareCountsAPanicAsAFailure(t *testing.T) {
	m := New()
	h := m.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { panic("bad") }))
	func() {
		defer func() { _ = recover() }()
		_ = h.ProcessTask(context.Background(), task("acme", time.Time{}))
	}()
	want := map[string]float64{
		`admitq_tasks_processed_total{tenant="acme"}`: 1,
		`admitq_tasks_failed_total{tenant="acme"}`:    1,
	}
	if diff := cmp.Diff(want, gather(t, m, "admitq_tasks_processed_total", "admitq_tasks_failed_total")); diff != "" {
		t.Errorf("after a panic (-want,+got):\n%s", diff)
	}
}

// A process that both produces and works (admitq demo --metrics-addr) starts
// every series of a tenant at zero, whichever use comes first.
func TestAProcessThatProducesAndWorksStartsEverySeries(t *testing.T) {
	for _, producerFirst := range []bool{true, false} {
		m := New()
		produce := func() { m.ObserveDecision(admission.Decision{Tenant: "acme", Outcome: admission.Admitted}) }
		work := func() {
			_ = m.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })).
				ProcessTask(context.Background(), task("acme", time.Time{}))
		}
		if producerFirst {
			produce()
			work()
		} else {
			work()
			produce()
		}
		want := map[string]float64{
			`admitq_gate_decisions_total{outcome="admitted",tenant="acme"}`: 1,
			`admitq_gate_decisions_total{outcome="deferred",tenant="acme"}`: 0,
			`admitq_gate_decisions_total{outcome="rejected",tenant="acme"}`: 0,
			`admitq_tasks_processed_total{tenant="acme"}`:                   1,
			`admitq_tasks_failed_total{tenant="acme"}`:                      0,
		}
		got := gather(t, m, "admitq_gate_decisions_total", "admitq_tasks_processed_total", "admitq_tasks_failed_total")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("producer first %v: series (-want,+got):\n%s", producerFirst, diff)
		}
	}
}

func TestTenantsPastTheLimitShareOneLabel(t *testing.T) {
	m := New(WithMaxTenants(2))
	for _, tenant := range []string{"a", "b", "c", "d", "a"} {
		m.ObserveDecision(admission.Decision{Tenant: tenant, Outcome: admission.Admitted})
	}
	got := gather(t, m, "admitq_gate_decisions_total")
	for _, c := range []struct {
		tenant string
		want   float64
	}{{"a", 2}, {"b", 1}, {OtherTenant, 2}} {
		key := `admitq_gate_decisions_total{outcome="admitted",tenant="` + c.tenant + `"}`
		if got[key] != c.want {
			t.Errorf("%s = %v, want %v", key, got[key], c.want)
		}
	}
	if len(got) != 3*3 {
		t.Errorf("%d decision series, want %d (2 tenants and %q, 3 outcomes each)", len(got), 3*3, OtherTenant)
	}
}

func TestSeriesGatherUnderAPedanticRegistry(t *testing.T) {
	m := New()
	m.ObserveDecision(admission.Decision{Tenant: "acme"})
	_ = m.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil })).
		ProcessTask(context.Background(), task("acme", time.Now()))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m)
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// gather returns the samples of the named families, keyed by name and labels
// as the text format writes them; a histogram gives its _count and _sum.
func gather(t *testing.T, c prometheus.Collector, names ...string) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var ls []string
			for _, lp := range mt.GetLabel() {
				ls = append(ls, lp.GetName()+"="+strconv.Quote(lp.GetValue()))
			}
			labels := "{" + strings.Join(ls, ",") + "}"
			switch {
			case mt.GetCounter() != nil:
				out[mf.GetName()+labels] = mt.GetCounter().GetValue()
			case mt.GetGauge() != nil:
				out[mf.GetName()+labels] = mt.GetGauge().GetValue()
			case mt.GetHistogram() != nil:
				out[mf.GetName()+"_count"+labels] = float64(mt.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"+labels] = mt.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func TestMiddlewareCountsStartsAndWorkerSeconds(t *testing.T) {
	m := New()
	now := time.UnixMilli(1_780_000_000_000)
	m.now = func() time.Time { return now }
	h := m.Middleware()(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		now = now.Add(250 * time.Millisecond) // each run takes a quarter second
		return nil
	}))
	for _, tenant := range []string{"acme", "acme", "globex"} {
		_ = h.ProcessTask(context.Background(), task(tenant, time.Time{}))
	}
	want := map[string]float64{
		`admitq_tasks_started_total{tenant="acme"}`:   2,
		`admitq_tasks_started_total{tenant="globex"}`: 1,
		`admitq_task_seconds_total{tenant="acme"}`:    0.5,
		`admitq_task_seconds_total{tenant="globex"}`:  0.25,
	}
	got := gather(t, m, "admitq_tasks_started_total", "admitq_task_seconds_total")
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("starts and worker seconds (-want,+got):\n%s", diff)
	}
}
