package dashboard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// A Source is where the dashboard reads per-tenant counters: the Prometheus
// metrics of admitq's metrics package (admitq_gate_decisions_total,
// admitq_tasks_started_total, admitq_task_seconds_total), which producers
// and workers already keep. Reading them costs Redis nothing.
type Source interface {
	// Name says where the counters come from, for messages.
	Name() string
	Gather(ctx context.Context) ([]*dto.MetricFamily, error)
}

// Gatherer makes a Source of an in-process registry, such as the one
// admitq demo fills.
func Gatherer(name string, g prometheus.Gatherer) Source { return gathererSource{name, g} }

type gathererSource struct {
	name string
	g    prometheus.Gatherer
}

func (s gathererSource) Name() string { return s.name }

func (s gathererSource) Gather(context.Context) ([]*dto.MetricFamily, error) { return s.g.Gather() }

// counters are one tenant's running totals in one source, or their
// increase per second over an interval.
type counters struct {
	admitted, deferred, parked, rejected, started, busy float64
}

func (c counters) minus(p counters) counters {
	d := counters{c.admitted - p.admitted, c.deferred - p.deferred, c.parked - p.parked, c.rejected - p.rejected, c.started - p.started, c.busy - p.busy}
	// A counter that went down is a restarted process: it counted c since.
	if d.admitted < 0 || d.deferred < 0 || d.parked < 0 || d.rejected < 0 || d.started < 0 || d.busy < 0 {
		return c
	}
	return d
}

func (c counters) plus(o counters) counters {
	return counters{c.admitted + o.admitted, c.deferred + o.deferred, c.parked + o.parked, c.rejected + o.rejected, c.started + o.started, c.busy + o.busy}
}

func (c counters) per(secs float64) counters {
	return counters{c.admitted / secs, c.deferred / secs, c.parked / secs, c.rejected / secs, c.started / secs, c.busy / secs}
}

// readCounters sums the families of admitq's metrics by tenant.
func readCounters(fams []*dto.MetricFamily) map[string]counters {
	out := map[string]counters{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var tenant, outcome string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "tenant":
					tenant = l.GetValue()
				case "outcome":
					outcome = l.GetValue()
				}
			}
			v := m.GetCounter().GetValue()
			if m.GetCounter() == nil && m.GetUntyped() != nil {
				v = m.GetUntyped().GetValue()
			}
			c := out[tenant]
			switch f.GetName() {
			case "admitq_gate_decisions_total":
				switch outcome {
				case "admitted":
					c.admitted += v
				case "deferred":
					c.deferred += v
				case "parked":
					c.parked += v
				case "rejected":
					c.rejected += v
				}
			case "admitq_tasks_started_total":
				c.started += v
			case "admitq_task_seconds_total":
				c.busy += v
			default:
				continue
			}
			out[tenant] = c
		}
	}
	return out
}

// hasDecisions reports whether fams holds a decision series: a source
// without one is a worker, not a producer.
func hasDecisions(fams []*dto.MetricFamily) bool {
	for _, f := range fams {
		if f.GetName() == "admitq_gate_decisions_total" && len(f.GetMetric()) > 0 {
			return true
		}
	}
	return false
}

// rates samples the sources every interval and keeps, per tenant, the
// rates of the last history: a ring of points shared by all tenants. A
// point is each source's increase divided by the time since that source's
// last successful read, not by the interval: a read that failed, or one
// that came late, would otherwise make the next point too high.
type rates struct {
	sources  []Source
	every    time.Duration
	capacity int // points kept
	now      func() time.Time

	mu     sync.Mutex
	times  []time.Time           // end of each interval, oldest first
	series map[string][]counters // per tenant, per interval: the increase per second, aligned with times
	prev   []map[string]counters // per source: the totals last read
	prevAt []time.Time           // per source: when they were read
	decs   []bool                // per source: its last answer had decisions
	errs   map[string]string     // per source name: the last error, if any
}

func newRates(sources []Source, every, history time.Duration) *rates {
	return &rates{
		sources:  sources,
		every:    every,
		capacity: max(int(history/every), 2),
		now:      time.Now,
		series:   map[string][]counters{},
		prev:     make([]map[string]counters, len(sources)),
		prevAt:   make([]time.Time, len(sources)),
		decs:     make([]bool, len(sources)),
		errs:     map[string]string{},
	}
}

// run samples until ctx is done.
func (r *rates) run(ctx context.Context) {
	t := time.NewTicker(r.every)
	defer t.Stop()
	r.sample(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.sample(ctx)
		}
	}
}

// sample reads every source at once and appends one point.
func (r *rates) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.every)
	defer cancel()
	at := r.now() // when the sources are read: each counts up to about then
	read := make([]map[string]counters, len(r.sources))
	decs := make([]bool, len(r.sources))
	errs := make([]error, len(r.sources))
	var wg sync.WaitGroup
	for i, s := range r.sources {
		wg.Go(func() {
			fams, err := s.Gather(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			read[i], decs[i] = readCounters(fams), hasDecisions(fams)
		})
	}
	wg.Wait()
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
		return
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	delta := map[string]counters{}
	// A source read again after failed reads spans the points appended
	// meanwhile without it: they get its rate too, so that every point holds
	// each source's rate and rate × time adds up to what it counted.
	type span struct {
		after time.Time
		rates map[string]counters
	}
	var spans []span
	for i, cur := range read {
		name := r.sources[i].Name()
		if errs[i] != nil {
			r.errs[name] = errs[i].Error()
			continue // a source that did not answer adds nothing this time
		}
		delete(r.errs, name)
		r.decs[i] = decs[i]
		if r.prev[i] != nil { // the first read only sets the baseline
			secs := at.Sub(r.prevAt[i]).Seconds()
			if secs <= 0 {
				secs = r.every.Seconds()
			}
			sr := make(map[string]counters, len(cur))
			for t, c := range cur {
				sr[t] = c.minus(r.prev[i][t]).per(secs)
				delta[t] = delta[t].plus(sr[t])
			}
			if n := len(r.times); n > 0 && r.times[n-1].After(r.prevAt[i]) {
				spans = append(spans, span{r.prevAt[i], sr})
			}
		}
		r.prev[i], r.prevAt[i] = cur, at
	}
	first := len(r.times) == 0 && len(delta) == 0
	if first {
		// Nothing to plot yet; keep the baseline only.
		r.times = append(r.times, at)
		for t := range r.series {
			r.series[t] = append(r.series[t], counters{})
		}
		r.trim()
		return
	}
	n := len(r.times)
	r.times = append(r.times, at)
	for t, s := range r.series {
		r.series[t] = append(s, delta[t])
	}
	for t, d := range delta {
		if _, ok := r.series[t]; !ok {
			s := make([]counters, n+1)
			s[n] = d
			r.series[t] = s
		}
	}
	for _, sp := range spans {
		for j := n - 1; j >= 0 && r.times[j].After(sp.after); j-- {
			for t, c := range sp.rates {
				if c != (counters{}) {
					r.series[t][j] = r.series[t][j].plus(c)
				}
			}
		}
	}
	r.trim()
}

func (r *rates) trim() {
	if over := len(r.times) - r.capacity; over > 0 {
		r.times = r.times[over:]
		for t, s := range r.series {
			s = s[over:]
			idle := true
			for _, c := range s {
				if c != (counters{}) {
					idle = false
					break
				}
			}
			if idle {
				delete(r.series, t) // a tenant idle for the whole history costs nothing
				continue
			}
			r.series[t] = s
		}
	}
}

// ratePoints is a chart's data: per second rates per interval.
type ratePoints struct {
	Admitted []float64 `json:"admitted"`
	Deferred []float64 `json:"deferred"`
	Parked   []float64 `json:"parked"`
	Rejected []float64 `json:"rejected"`
	Started  []float64 `json:"started"`
}

// flags says whether a tenant is mostly at its limit or holds most of the
// worker time, with the figures behind it.
type flags struct {
	AtLimit     bool    `json:"at_limit"`
	AtLimitPart float64 `json:"at_limit_part"` // of the intervals with decisions, those with one deferred or rejected
	Hog         bool    `json:"hog"`
	BusyPart    float64 `json:"busy_part"` // of all tenants' worker seconds
}

// The flag rules, over the whole history kept (5 minutes by default):
//
//   - at limit: in more than half of the intervals in which the tenant got
//     decisions, at least one was deferred or rejected (the gate defers or
//     rejects only when the window is full), over at least minIntervals
//     such intervals;
//   - most worker time: the tenant's tasks took more than half of the worker
//     seconds of all tenants, while at least one other tenant ran tasks.
const (
	atLimitPart  = 0.5
	hogPart      = 0.5
	minIntervals = 5
)

// view is what a page needs from the rates: the times, since a given one,
// and the points and flags of the tenants asked for.
type view struct {
	Times  []int64               `json:"times"` // unix ms, end of each interval
	Series map[string]ratePoints `json:"series"`
	Flags  map[string]flags      `json:"flags"`
	Errors []string              `json:"errors,omitempty"`
	// NoDecisions: some source answered, and none exports decisions
	// (admitq_gate_decisions_total), so the decision charts stay empty.
	// Producers export them; admitq worker exports task starts only.
	NoDecisions bool `json:"no_decisions,omitempty"`
}

// view returns, for the tenants asked (and, when rest, the sum of those
// not in exclude under defaultKey), the rates after since (unix ms; 0 for
// all).
func (r *rates) view(tenants []string, since int64, rest bool, exclude map[string]bool) view {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := view{Times: []int64{}, Series: map[string]ratePoints{}, Flags: map[string]flags{}}
	for name, e := range r.errs {
		v.Errors = append(v.Errors, fmt.Sprintf("%s: %s", name, e))
	}
	answered := false
	v.NoDecisions = true
	for i := range r.sources {
		answered = answered || r.prev[i] != nil
		if r.decs[i] {
			v.NoDecisions = false
		}
	}
	v.NoDecisions = v.NoDecisions && answered
	from := 0
	for from < len(r.times) && r.times[from].UnixMilli() <= since {
		from++
	}
	for _, t := range r.times[from:] {
		v.Times = append(v.Times, t.UnixMilli())
	}
	toPoints := func(s []counters) ratePoints {
		n := len(r.times) - from
		p := ratePoints{
			Admitted: make([]float64, n), Deferred: make([]float64, n), Parked: make([]float64, n),
			Rejected: make([]float64, n), Started: make([]float64, n),
		}
		for i := from; i < len(r.times); i++ {
			if i >= len(s) {
				break
			}
			c := s[i]
			p.Admitted[i-from], p.Deferred[i-from], p.Parked[i-from], p.Rejected[i-from], p.Started[i-from] = c.admitted, c.deferred, c.parked, c.rejected, c.started
		}
		return p
	}
	totalBusy, busyTenants := r.busyTotals()
	empty := make([]counters, len(r.times))
	for _, t := range tenants {
		s, ok := r.series[t]
		if !ok {
			s = empty
		}
		v.Series[t] = toPoints(s)
		v.Flags[t] = flagsOf(s, totalBusy, busyTenants)
	}
	if rest {
		sum := make([]counters, len(r.times))
		for t, s := range r.series {
			if exclude[t] {
				continue
			}
			for i, c := range s {
				sum[i] = sum[i].plus(c)
			}
		}
		v.Series[defaultKey] = toPoints(sum)
	}
	return v
}

func flagsOf(s []counters, totalBusy float64, busyTenants int) flags {
	var f flags
	withDecisions, limited := 0, 0
	busy := 0.0
	for _, c := range s {
		busy += c.busy
		if c.admitted+c.deferred+c.parked+c.rejected > 0 {
			withDecisions++
			if c.deferred+c.rejected > 0 {
				limited++
			}
		}
	}
	if withDecisions > 0 {
		f.AtLimitPart = float64(limited) / float64(withDecisions)
	}
	f.AtLimit = withDecisions >= minIntervals && f.AtLimitPart > atLimitPart
	if totalBusy > 0 {
		f.BusyPart = busy / totalBusy
	}
	f.Hog = f.BusyPart > hogPart && busyTenants > 1
	return f
}

// flagged returns the tenants, of all those in the history, that carry a
// flag: the filter of the tenants page.
func (r *rates) flagged() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	totalBusy, busyTenants := r.busyTotals()
	out := map[string]bool{}
	for t, s := range r.series {
		if f := flagsOf(s, totalBusy, busyTenants); f.AtLimit || f.Hog {
			out[t] = true
		}
	}
	return out
}

// tenantsNotIn returns the tenants in the history that are not in own:
// those on the default quota, or with none.
func (r *rates) tenantsNotIn(own map[string]bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for t := range r.series {
		if !own[t] {
			out = append(out, t)
		}
	}
	return out
}

// busyTotals returns the worker seconds of every tenant in the history,
// and how many tenants had any: the "most worker time" flag's terms.
// r.mu must be held.
func (r *rates) busyTotals() (total float64, tenants int) {
	for _, s := range r.series {
		b := 0.0
		for _, c := range s {
			b += c.busy
		}
		total += b
		if b > 0 {
			tenants++
		}
	}
	return total, tenants
}
