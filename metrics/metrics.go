package metrics

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/worker"
)

// DefaultMaxTenants is how many distinct tenants get their own label value
// when WithMaxTenants is not given.
const DefaultMaxTenants = 1000

// OtherTenant is the tenant label value of every tenant past the limit set by
// WithMaxTenants.
const OtherTenant = "_other"

// DefaultDelayBuckets are the upper bounds, in seconds, of the
// admitq_queue_delay_seconds buckets. A deferred task starts within about a
// second of its slot when workers keep up (asynq promotes scheduled tasks
// once a second); the long tail is a backlog.
var DefaultDelayBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// An Option configures New.
type Option interface {
	apply(*options)
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	maxTenants int
	label      func(string) string
	buckets    []float64
	isFailure  func(error) bool
}

// WithMaxTenants sets how many distinct tenant label values the Metrics
// hands out; later tenants are counted as OtherTenant. Zero or negative means
// DefaultMaxTenants. The limit applies after WithTenantLabel's mapping.
func WithMaxTenants(n int) Option {
	return optionFunc(func(o *options) {
		if n > 0 {
			o.maxTenants = n
		}
	})
}

// WithTenantLabel maps a tenant to its label value, for example to group
// tenants by plan. It must be safe for concurrent use. Nil means the tenant
// itself.
func WithTenantLabel(f func(tenant string) string) Option {
	return optionFunc(func(o *options) { o.label = f })
}

// WithDelayBuckets sets the buckets of admitq_queue_delay_seconds, in
// seconds. Empty means DefaultDelayBuckets.
func WithDelayBuckets(b []float64) Option {
	return optionFunc(func(o *options) {
		if len(b) > 0 {
			o.buckets = slices.Clone(b)
		}
	})
}

// WithIsFailure decides which handler errors count in
// admitq_tasks_failed_total; pass the worker's Config.IsFailure to agree with
// it. Nil means every error except a *worker.ThrottledError, which mirrors
// the worker's own rule.
func WithIsFailure(f func(error) bool) Option {
	return optionFunc(func(o *options) { o.isFailure = f })
}

// Metrics counts gate decisions and task runs by tenant. Create it with New
// and register it with a prometheus.Registerer. It is safe for concurrent
// use. A zero or nil Metrics observes nothing.
type Metrics struct {
	decisions *prometheus.CounterVec
	processed *prometheus.CounterVec
	failed    *prometheus.CounterVec
	started   *prometheus.CounterVec
	busy      *prometheus.CounterVec
	delay     *prometheus.HistogramVec
	depth     depthGauges // dispatch.go
	keys      keyGauges   // dispatch.go

	label     func(string) string
	isFailure func(error) bool
	now       func() time.Time

	maxTenants int
	mu         sync.Mutex
	tenants    map[string]roles // label values handed out, at most maxTenants, and the series each has started
}

// roles are the series a tenant label value has been started at zero for.
// A process that both produces and works starts each set on its own first
// use, so neither use hides the other's series.
type roles uint8

const (
	producerRole roles = 1 << iota // admitq_gate_decisions_total
	workerRole                     // admitq_tasks_failed_total
)

// New returns Metrics with no observations. Register it before serving.
func New(opts ...Option) *Metrics {
	o := options{maxTenants: DefaultMaxTenants, buckets: DefaultDelayBuckets}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if o.isFailure == nil {
		o.isFailure = func(err error) bool {
			var te *worker.ThrottledError
			return err != nil && !errors.As(err, &te)
		}
	}
	return &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "admitq_gate_decisions_total",
			Help: "Admission decisions by tenant and outcome (admitted, deferred, parked, rejected).",
		}, []string{"tenant", "outcome"}),
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "admitq_tasks_processed_total",
			Help: "Task runs that ended, failed or not, by tenant.",
		}, []string{"tenant"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "admitq_tasks_failed_total",
			Help: "Task runs that failed, by tenant.",
		}, []string{"tenant"}),
		started: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "admitq_tasks_started_total",
			Help: "Task runs that started, retries included, by tenant.",
		}, []string{"tenant"}),
		busy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "admitq_task_seconds_total",
			Help: "Seconds of worker time spent in task runs that ended, by tenant.",
		}, []string{"tenant"}),
		delay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "admitq_queue_delay_seconds",
			Help:    "Time from a task's admission slot to the start of its first run, by tenant.",
			Buckets: o.buckets,
		}, []string{"tenant"}),
		depth:      newDepthGauges(),
		keys:       newKeyGauges(),
		label:      o.label,
		isFailure:  o.isFailure,
		now:        time.Now,
		maxTenants: o.maxTenants,
		tenants:    make(map[string]roles),
	}
}

// made reports whether New made m: a nil or zero Metrics observes
// nothing and describes no series, rather than panic.
func (m *Metrics) made() bool { return m != nil && m.decisions != nil }

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	if !m.made() {
		return
	}
	m.decisions.Describe(ch)
	m.processed.Describe(ch)
	m.failed.Describe(ch)
	m.started.Describe(ch)
	m.busy.Describe(ch)
	m.delay.Describe(ch)
	for _, v := range m.gauges() {
		v.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	if !m.made() {
		return
	}
	m.decisions.Collect(ch)
	m.processed.Collect(ch)
	m.failed.Collect(ch)
	m.started.Collect(ch)
	m.busy.Collect(ch)
	m.delay.Collect(ch)
	for _, v := range m.gauges() {
		v.Collect(ch)
	}
}

var outcomes = []admission.Outcome{admission.Admitted, admission.Deferred, admission.Rejected}

// ObserveDecision counts d under its tenant and outcome. Call it for every
// decision a producer gets, including rejections (enqueue.RejectedError
// carries the Decision). A Decision with no outcome (admission.NoOutcome,
// returned beside an error) is not counted.
func (m *Metrics) ObserveDecision(d admission.Decision) {
	if !m.made() || d.Outcome == admission.NoOutcome {
		return
	}
	tenant, first := m.tenantLabel(d.Tenant, producerRole)
	if first {
		// Start every outcome at zero, so rate() and alerts see the series
		// before the first rejection.
		for _, o := range outcomes {
			m.decisions.WithLabelValues(tenant, o.String())
		}
	}
	m.decisions.WithLabelValues(tenant, d.Outcome.String()).Inc()
}

// Middleware returns asynq middleware that counts each run of a task by
// tenant (from the enqueue.TenantHeader header) and, on a task's first start,
// observes its queueing delay (from the enqueue.SlotHeader header). Put it in
// worker.Config.Middleware: the Worker tells a first start from a rerun after
// a throttled retry or a shutdown (worker.FirstStart, one Redis round trip
// per task that carries a slot). With a plain asynq.ServeMux only retries
// after failures are told apart, and such reruns add delay samples too.
func (m *Metrics) Middleware() asynq.MiddlewareFunc {
	if !m.made() {
		return func(next asynq.Handler) asynq.Handler { return next }
	}
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			start := m.now()
			tenant, first := m.tenantLabel(t.Headers()[enqueue.TenantHeader], workerRole)
			if first {
				m.failed.WithLabelValues(tenant)
			}
			m.started.WithLabelValues(tenant).Inc()
			if slot, ok := TaskSlot(t); ok && firstRun(ctx) {
				m.delay.WithLabelValues(tenant).Observe(max(start.Sub(slot), 0).Seconds())
			}
			ended := false
			defer func() {
				m.busy.WithLabelValues(tenant).Add(m.now().Sub(start).Seconds())
				m.processed.WithLabelValues(tenant).Inc()
				if !ended { // panicking: the worker turns it into a failure
					m.failed.WithLabelValues(tenant).Inc()
				}
			}()
			err := next.ProcessTask(ctx, t)
			ended = true
			if m.isFailure(err) {
				m.failed.WithLabelValues(tenant).Inc()
			}
			return err
		})
	}
}

// TaskSlot returns the slot stamped in t's enqueue.SlotHeader, if it has one.
func TaskSlot(t *asynq.Task) (time.Time, bool) {
	v, ok := t.Headers()[enqueue.SlotHeader]
	if !ok {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// firstRun reports whether this is the task's first start. Under a
// worker.Worker that is exact: a throttled retry or a shutdown's requeue runs
// the task again without raising its retry count, and worker.FirstStart
// tells those reruns apart. Elsewhere it falls back to the retry count.
func firstRun(ctx context.Context) bool {
	return worker.FirstStart(ctx)
}

// tenantLabel maps tenant to its label value and reports whether this is the
// first time the value is used in role.
func (m *Metrics) tenantLabel(tenant string, role roles) (string, bool) {
	if m.label != nil {
		tenant = m.label(tenant)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen, ok := m.tenants[tenant]
	if !ok && len(m.tenants) >= m.maxTenants {
		tenant = OtherTenant
		seen, ok = m.tenants[tenant]
	}
	if ok && seen&role != 0 {
		return tenant, false
	}
	m.tenants[tenant] = seen | role
	return tenant, true
}
