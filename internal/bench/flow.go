package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/worktime"
)

// Flow is the ID of the flow-control scenario (RunFlow), which `admitq
// bench --only flow` runs instead of the throughput rows.
const Flow = "flow"

// FlowConfig is the flow-control scenario: concurrency keys and pause on
// a fair pool (worker.Config{Gate, Fair: true} with enqueue.Client
// producers) on one Redis or one Redis Cluster, each part against the same
// work without keys or without a pause. Zero fields take the defaults in
// brackets.
type FlowConfig struct {
	// Redis is the server to run on; nil starts a throwaway redis-server,
	// unless Cluster or StartCluster is set.
	Redis *redis.Options `json:"-"`
	// Cluster, when set and Redis is nil, runs on this Redis Cluster; and
	// StartCluster, when Redis and Cluster are nil, on a throwaway one of 3
	// masters. Redis CPU and commands are summed over the masters.
	Cluster      *redis.ClusterOptions `json:"-"`
	StartCluster bool                  `json:"-"`
	// Tenants share one key capped at KeyCap [1,000; 20]. Each has
	// PerTenant tasks carrying the key and as many carrying none,
	// alternately, each of Task [4; 10 ms].
	Tenants   int           `json:"tenants"`
	PerTenant int           `json:"per_tenant"`
	KeyCap    int           `json:"key_cap"`
	Task      time.Duration `json:"task_ns"`
	// CPUTasks is the backlog of 1 ms tasks drained with no key on each
	// task, with one and with three [3,000].
	CPUTasks int `json:"cpu_tasks"`
	// Paused is a paused tenant's backlog of 5 ms tasks, resumed [10,000];
	// Ordered the backlog of another paused tenant capped at 1, resumed
	// with it, whose tasks must start in exactly the order they were
	// enqueued [100].
	Paused  int `json:"paused"`
	Ordered int `json:"ordered"`
	// Concurrency is the fair pool of every part [64].
	Concurrency int `json:"concurrency"`
	// Producers is the goroutines that enqueue [16].
	Producers int `json:"producers"`
	// Runs is how many times the whole scenario runs [1]; the report gives
	// each ratio's spread over them.
	Runs int `json:"runs"`
	// Progress, when set, hears what the scenario is doing.
	Progress func(string) `json:"-"`
}

func (c FlowConfig) withDefaults() FlowConfig {
	for _, f := range []struct {
		v *int
		d int
	}{
		{&c.Tenants, 1000}, {&c.PerTenant, 4}, {&c.KeyCap, 20}, {&c.CPUTasks, 3000},
		{&c.Paused, 10_000}, {&c.Ordered, 100}, {&c.Concurrency, 64}, {&c.Producers, 16}, {&c.Runs, 1},
	} {
		if *f.v <= 0 {
			*f.v = f.d
		}
	}
	if c.Task <= 0 {
		c.Task = 10 * time.Millisecond
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	return c
}

// Scale returns c with its defaults filled in and its task counts
// (Tenants, CPUTasks, Paused, Ordered) multiplied by f, each at least 2.
func (c FlowConfig) Scale(f float64) FlowConfig {
	c = c.withDefaults()
	for _, v := range []*int{&c.Tenants, &c.CPUTasks, &c.Paused, &c.Ordered} {
		*v = max(2, int(math.Round(float64(*v)*f)))
	}
	return c
}

// The flow scenario's keys, tenants and task times.
const (
	sharedKey     = "api:shared"
	pausedTenant  = "paused"
	orderedTenant = "paused-cap1"
	pauseTask     = 5 * time.Millisecond
	cpuTask       = time.Millisecond
	// cpuKeyCap is the cap of the keys of the Redis CPU part: above any
	// queue's depth, so never reached, but counted.
	cpuKeyCap = 1000
)

// cpuKeys are the keys the Redis CPU part puts on every task, one or all.
var cpuKeys = []string{"api:one", "api:two", "api:three"}

// The classes of the key part's tasks.
const (
	keyedClass   = "keyed"
	keylessClass = "keyless"
)

// FlowMeasure is one figure of the flow scenario, with a value per run.
type FlowMeasure struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Value is the figure in each run, with keys or a pause; Against the
	// same work's without them (no keys on any task; the backlog drained
	// without a pause), empty where there is nothing to compare.
	Value   []float64 `json:"value"`
	Against []float64 `json:"against,omitempty"`
	// Target is what the design asks of the figure, if anything.
	Target string `json:"target,omitempty"`
}

// FlowReport is the flow scenario's result.
type FlowReport struct {
	Config   FlowConfig    `json:"config"`
	Measures []FlowMeasure `json:"measures"`
	// Checks are the invariants every run checked (a key's tasks never
	// running above its cap, every task running once, a paused tenant's
	// tasks not running, a tenant capped at 1 starting in order), and
	// Violations what broke them, by run; none when all held.
	Checks     []string `json:"checks"`
	Violations []string `json:"violations,omitempty"`
	// Masters is how many masters the Redis Cluster it ran on has; 0 on
	// one server.
	Masters int `json:"masters,omitempty"`
}

// add records one run's value of a measure (and what it is against, if
// given).
func (r *FlowReport) add(name, unit, target string, value float64, against ...float64) {
	i := slices.IndexFunc(r.Measures, func(m FlowMeasure) bool { return m.Name == name })
	if i < 0 {
		r.Measures = append(r.Measures, FlowMeasure{Name: name, Unit: unit, Target: target})
		i = len(r.Measures) - 1
	}
	m := &r.Measures[i]
	m.Value = append(m.Value, value)
	m.Against = append(m.Against, against...)
}

// RunFlow measures concurrency keys and pause on a fair pool with real
// workers on one Redis: a key shared by many tenants beside tasks without
// it (the key's peak in flight, the pool's busy share and the keyless
// tasks' throughput, against the same tasks without keys); Redis's CPU per
// task with one and three keys on every task, against none; and a paused
// tenant's backlog resumed (the time to drain it and its order, against
// the same backlog drained without a pause). Each pair runs back to back,
// in alternating order run by run. It returns an error when a run could
// not be measured; broken invariants are in the report's Violations.
func RunFlow(ctx context.Context, cfg FlowConfig) (FlowReport, error) {
	cfg = cfg.withDefaults()
	rep := FlowReport{Config: cfg, Checks: []string{
		fmt.Sprintf("the key's tasks never run more than %d at once", cfg.KeyCap),
		"every task runs once",
		"no task of a paused tenant runs",
		"a paused tenant capped at 1 starts its tasks in enqueue order",
	}}
	tg, done, err := scenarioTarget(ctx, cfg.Redis, cfg.Cluster, cfg.StartCluster)
	if err != nil {
		return rep, err
	}
	defer done()
	if rep.Masters, err = masters(ctx, tg.admin); err != nil {
		return rep, err
	}
	for i := range cfg.Runs {
		s := &flowRun{cfg: cfg, rep: &rep, withFirst: i%2 == 0}
		if cfg.Runs > 1 {
			s.step = fmt.Sprintf("run %d/%d: ", i+1, cfg.Runs)
		}
		// The pools, their producers and the drain come from the
		// dispatcher's scenario.
		s.d = &dispatchRun{cfg: DispatchConfig{Concurrency: cfg.Concurrency, Producers: cfg.Producers, Progress: cfg.Progress}.withDefaults(),
			tg: tg, step: s.step}
		if err := s.all(ctx); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// flowRun is one run of the flow scenario.
type flowRun struct {
	cfg       FlowConfig
	rep       *FlowReport
	d         *dispatchRun
	withFirst bool   // keys or pause before the run without
	step      string // "run i/n: " when there are several
}

func (s *flowRun) all(ctx context.Context) error {
	for _, part := range []func(context.Context) error{s.keys, s.cpu, s.pause} {
		if err := part(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (s *flowRun) progress(what string) { s.cfg.Progress(s.step + what) }

// violated records a broken invariant.
func (s *flowRun) violated(format string, args ...any) {
	s.rep.Violations = append(s.rep.Violations, s.step+fmt.Sprintf(format, args...))
}

// both runs f with and without (keys, a pause), in this run's order.
func (s *flowRun) both(f func(with bool) error) error {
	order := []bool{true, false}
	if !s.withFirst {
		order = []bool{false, true}
	}
	for _, with := range order {
		if err := f(with); err != nil {
			return err
		}
	}
	return nil
}

// keyed is one drain of the key part.
type keyed struct {
	peak     int // the most tasks carrying the key running at once
	inFlight int // the most in flight, pending or active, by Stats
	// Means over the cap while some of the key's tasks wait: of those in
	// flight by Stats, of those running.
	inFlightUsed, capUsed float64
	busy                  float64 // the pool's busy share while both classes wait
	keyless               float64 // keyless tasks started per second meanwhile
	took                  time.Duration
}

// keys: Tenants tenants each with tasks carrying the shared key and tasks
// carrying none, alternately, on a fair pool; against the same tasks, none
// carrying a key.
func (s *flowRun) keys(ctx context.Context) error {
	c := s.cfg
	var with, without keyed
	if err := s.both(func(k bool) error {
		name := fmt.Sprintf("%d tenants, half their tasks on %s capped at %d", c.Tenants, sharedKey, c.KeyCap)
		if !k {
			name = fmt.Sprintf("%d tenants, no keys", c.Tenants)
		}
		s.progress(name)
		r, err := s.keyPool(ctx, k)
		if err != nil {
			return fmt.Errorf("bench: %s: %w", name, err)
		}
		with, without = pick(k, r, with, without)
		return nil
	}); err != nil {
		return err
	}
	if with.peak > c.KeyCap {
		s.violated("%s ran %d tasks at once, above its cap of %d", sharedKey, with.peak, c.KeyCap)
	}
	if with.inFlight > c.KeyCap {
		s.violated("%s had %d tasks in flight by the dispatcher's Stats, above its cap of %d", sharedKey, with.inFlight, c.KeyCap)
	}
	s.rep.add(fmt.Sprintf("key capped at %d: most of its tasks running at once", c.KeyCap), "tasks", fmt.Sprintf("≤ %d", c.KeyCap), float64(with.peak))
	s.rep.add(fmt.Sprintf("key capped at %d: most in flight by Stats (sampled)", c.KeyCap), "tasks", fmt.Sprintf("≤ %d", c.KeyCap), float64(with.inFlight))
	s.rep.add("key: share of its cap in flight by Stats while its tasks wait", "of cap", "", with.inFlightUsed)
	s.rep.add("key: share of its cap running while its tasks wait", "of cap", "", with.capUsed)
	s.rep.add("pool busy while both kinds wait", "of pool", "", with.busy, without.busy)
	s.rep.add("keyless tasks started while both kinds wait", "tasks/s", "", with.keyless, without.keyless)
	s.rep.add("all tasks: release to last end", "s", "", with.took.Seconds(), without.took.Seconds())
	return nil
}

// keyPool drains the key part's tasks, enqueued while the pool is held:
// with the key on half of them, or on none.
func (s *flowRun) keyPool(ctx context.Context, withKey bool) (keyed, error) {
	c := s.cfg
	spec := poolSpec{fair: true, workers: c.Concurrency, task: c.Task, hold: true}
	if withKey {
		spec.keys = map[string]admission.Quota{sharedKey: {Limit: admission.NoLimit, MaxInFlight: c.KeyCap}}
	}
	p, err := s.d.start(ctx, spec)
	if err != nil {
		return keyed{}, err
	}
	defer p.close()
	per := 2 * c.PerTenant
	n := c.Tenants * per
	tasks := make(map[string][]*asynq.Task, c.Tenants)
	for t := range c.Tenants {
		ts := make([]*asynq.Task, per)
		for i := range ts {
			seq := t*per + i
			switch {
			case i%2 == 1:
				ts[i] = asynq.NewTask("flow", labelled(seq, keylessClass))
			case withKey:
				ts[i] = asynq.NewTask("flow", labelled(seq, keyedClass, sharedKey), enqueue.Keys(sharedKey))
			default:
				ts[i] = asynq.NewTask("flow", labelled(seq, keyedClass))
			}
		}
		tasks["t"+strconv.Itoa(t)] = ts
	}
	if err := s.fill(ctx, p, tasks); err != nil {
		return keyed{}, err
	}
	p.release()
	var waiting atomic.Bool // the key's tasks wait, but for its last KeyCap
	waiting.Store(true)
	sampled := s.sampleKey(ctx, p, &waiting)
	var seen, keyedEnded int
	keyedTasks := c.Tenants * c.PerTenant
	// p.wait calls done under p.mu, every 5 ms.
	if err := p.wait(ctx, n*int(c.Task)/c.KeyCap*2, func(map[string]int) bool {
		for ; seen < len(p.runs); seen++ {
			if p.runs[seen].class == keyedClass {
				keyedEnded++
			}
		}
		// The last KeyCap tasks run with nothing waiting behind them.
		if keyedEnded >= keyedTasks-c.KeyCap {
			waiting.Store(false)
		}
		return len(p.runs) >= n
	}); err != nil {
		sampled()
		return keyed{}, err
	}
	inFlight, inFlightUsed, err := sampled()
	if err != nil {
		return keyed{}, fmt.Errorf("reading the dispatcher's Stats: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.ranOnce(p.runs, n, "the key part")
	r := keyed{peak: p.keyPeak[sharedKey], inFlight: inFlight, inFlightUsed: inFlightUsed / float64(c.KeyCap)}
	byClass := make([]worktime.Run, len(p.runs))
	for i, run := range p.runs {
		byClass[i] = worktime.Run{Tenant: run.class, Start: run.Start, End: run.End}
	}
	if withKey {
		r.capUsed = capShare(byClass, keyedClass, c.KeyCap, p.released) // exact, as a capped tenant's
	}
	from, to := worktime.Contended(byClass, keyedClass, keylessClass)
	if span := to.Sub(from); span > 0 {
		used := worktime.Used(byClass, from, to)
		r.busy = float64(used[keyedClass]+used[keylessClass]) / float64(span) / float64(c.Concurrency)
		started := 0
		for _, run := range byClass {
			if run.Tenant == keylessClass && !run.Start.Before(from) && run.Start.Before(to) {
				started++
			}
		}
		r.keyless = float64(started) / span.Seconds()
	}
	_, last := worktime.Span(byClass)
	r.took = last.Sub(p.released)
	return r, nil
}

// statsEvery is how often the key part reads the dispatcher's Stats: in
// both of its runs, so that the reads weigh alike.
const statsEvery = 50 * time.Millisecond

// sampleKey reads the dispatcher's Stats of the pool's queue every
// statsEvery until stop is called, which returns the most tasks of the
// shared key in flight that Stats reported, their mean while waiting was
// true, and the first error.
func (s *flowRun) sampleKey(ctx context.Context, p *pool, waiting *atomic.Bool) (stop func() (peak int, mean float64, err error)) {
	ctx, cancel := context.WithCancel(ctx)
	d := dispatch.New(p.rdb, p.gate, slog.New(slog.DiscardHandler))
	var peak, sum, samples int
	var err error
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(statsEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			qs, e := d.Stats(ctx, queue)
			if e != nil {
				if ctx.Err() == nil && err == nil {
					err = e
				}
				continue
			}
			in := 0
			for _, k := range qs.Keys {
				if k.Key == sharedKey {
					in = k.InFlight
				}
			}
			peak = max(peak, in)
			if waiting.Load() {
				sum += in
				samples++
			}
		}
	})
	return func() (int, float64, error) {
		cancel()
		wg.Wait()
		if samples == 0 {
			return peak, 0, err
		}
		return peak, float64(sum) / float64(samples), err
	}
}

// fill sends each tenant its tasks in order, tenants from Producers
// goroutines at once.
func (s *flowRun) fill(ctx context.Context, p *pool, tasks map[string][]*asynq.Task) error {
	next := make(chan string, len(tasks))
	for t := range tasks {
		next <- t
	}
	close(next)
	errs := make(chan error, s.cfg.Producers)
	var wg sync.WaitGroup
	for range s.cfg.Producers {
		wg.Go(func() {
			for t := range next {
				if err := p.fillTasks(ctx, t, tasks[t]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// ranOnce records a violation unless the runs are of tasks 0 to n-1, each
// once.
func (s *flowRun) ranOnce(runs []run, n int, part string) {
	times := make([]int, n)
	odd := 0
	for _, r := range runs {
		if r.seq < 0 || r.seq >= n {
			odd++
			continue
		}
		times[r.seq]++
	}
	var never, twice int
	for _, t := range times {
		switch {
		case t == 0:
			never++
		case t > 1:
			twice += t - 1
		}
	}
	if never+twice+odd > 0 {
		s.violated("%s: of %d tasks, %d never ran, %d ran again, %d unknown ran", part, n, never, twice, odd)
	}
}

// cpu: Redis's CPU and commands per task of a backlog drained with no key
// on each task, one and three, each key capped above the queue's depth.
func (s *flowRun) cpu(ctx context.Context) error {
	c := s.cfg
	counts := []int{0, 1, 3}
	if !s.withFirst {
		slices.Reverse(counts)
	}
	got := map[int]drained{}
	for _, k := range counts {
		spec := poolSpec{fair: true, workers: c.Concurrency, task: cpuTask}
		if k > 0 {
			spec.keys = map[string]admission.Quota{}
			for _, key := range cpuKeys[:k] {
				spec.keys[key] = admission.Quota{Limit: admission.NoLimit, MaxInFlight: cpuKeyCap}
			}
			spec.taskOpts = []asynq.Option{enqueue.Keys(cpuKeys[:k]...)}
		}
		what := fmt.Sprintf("drain %d tasks of %v with %d key(s) each", c.CPUTasks, cpuTask, k)
		s.progress(what)
		d, err := s.d.drainPool(ctx, spec, c.CPUTasks)
		if err != nil {
			return fmt.Errorf("bench: %s: %w", what, err)
		}
		got[k] = d
	}
	for _, k := range []int{1, 3} {
		keys := map[bool]string{false: "1 key", true: "3 keys"}[k > 1]
		s.rep.add("Redis CPU per task, "+keys+" on each", "µs", "", got[k].cpu, got[0].cpu)
		s.rep.add("Redis commands per task, "+keys+" on each", "calls", "", got[k].commands, got[0].commands)
	}
	return nil
}

// resumed is one drain of the pause part.
type resumed struct {
	first, took time.Duration // resume (or release) to the first start, to the last end
	inversions  int           // pairs of the paused tenant's tasks started out of order
	displaced   int           // most places a task started away from its enqueue order
}

// pause: a paused tenant's backlog resumed, beside a paused tenant capped
// at 1; against the same backlogs enqueued while the pool is held, then
// released.
func (s *flowRun) pause(ctx context.Context) error {
	c := s.cfg
	var with, without resumed
	if err := s.both(func(paused bool) error {
		name := fmt.Sprintf("a paused tenant's %d tasks, resumed", c.Paused)
		if !paused {
			name = fmt.Sprintf("a tenant's %d tasks, released", c.Paused)
		}
		s.progress(name)
		r, err := s.pausePool(ctx, paused)
		if err != nil {
			return fmt.Errorf("bench: %s: %w", name, err)
		}
		with, without = pick(paused, r, with, without)
		return nil
	}); err != nil {
		return err
	}
	at := fmt.Sprintf("%d tasks of %s", c.Paused, fmtTask(pauseTask))
	// Against a release, which starts held handlers at once, a ratio says
	// nothing.
	s.rep.add("paused, "+at+": resume to first start", "s", "", with.first.Seconds())
	s.rep.add("paused, "+at+": resume to last end", "s", "", with.took.Seconds(), without.took.Seconds())
	s.rep.add("paused: pairs of its tasks started out of enqueue order", "pairs", "", float64(with.inversions), float64(without.inversions))
	s.rep.add("paused: most places a task started from its enqueue order", "places", fmt.Sprintf("≤ %d (the pool)", c.Concurrency),
		float64(with.displaced), float64(without.displaced))
	return nil
}

// pausePool drains the pause part's backlogs: enqueued while their tenants
// are paused, then resumed as an operator would, from another client; or
// enqueued while the pool is held, then released.
func (s *flowRun) pausePool(ctx context.Context, paused bool) (resumed, error) {
	c := s.cfg
	q := admission.Quota{Limit: 100_000, Window: time.Second, MaxParked: admission.MaxParkedCap, Paused: paused}
	capped := q
	capped.MaxInFlight = 1
	p, err := s.d.start(ctx, poolSpec{fair: true, workers: c.Concurrency, task: pauseTask, hold: !paused,
		tenants: map[string]admission.Quota{pausedTenant: q, orderedTenant: capped}})
	if err != nil {
		return resumed{}, err
	}
	defer p.close()
	n := c.Paused + c.Ordered
	tasks := map[string][]*asynq.Task{pausedTenant: make([]*asynq.Task, c.Paused), orderedTenant: make([]*asynq.Task, c.Ordered)}
	for i := range n {
		t, j := pausedTenant, i
		if i >= c.Paused {
			t, j = orderedTenant, i-c.Paused
		}
		tasks[t][j] = asynq.NewTask("flow", labelled(i, t))
	}
	if err := s.fill(ctx, p, tasks); err != nil {
		return resumed{}, err
	}
	var begin time.Time
	if paused {
		// A task let in by mistake would start within the pool's poll.
		if err := sleepUntil(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
			return resumed{}, err
		}
		p.mu.Lock()
		early := len(p.runs) + p.running[pausedTenant] + p.running[orderedTenant]
		p.mu.Unlock()
		if early > 0 {
			s.violated("%d tasks of paused tenants ran before they were resumed", early)
		}
		rq := admission.NewRedisQuotas(s.d.tg.admin, admission.WithPrefix(Prefix))
		q.Paused, capped.Paused = false, false
		begin = time.Now()
		if err := rq.Set(ctx, pausedTenant, q); err != nil {
			return resumed{}, err
		}
		if err := rq.Set(ctx, orderedTenant, capped); err != nil {
			return resumed{}, err
		}
	} else {
		p.release()
		begin = p.released
	}
	within := c.Paused*int(pauseTask)/c.Concurrency*4 + c.Ordered*int(pauseTask+20*time.Millisecond)*2
	if err := p.wait(ctx, within, func(map[string]int) bool { return len(p.runs) >= n }); err != nil {
		return resumed{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.ranOnce(p.runs, n, "the pause part")
	var big, one []run
	for _, r := range p.runs {
		switch r.Tenant {
		case pausedTenant:
			big = append(big, r)
		case orderedTenant:
			one = append(one, r)
		}
	}
	if inv, _ := startOrder(one, c.Paused); inv > 0 {
		s.violated("the tenant capped at 1 started %d pairs of its %d tasks out of enqueue order", inv, len(one))
	}
	first, last := worktime.Span(workRuns(big))
	r := resumed{first: first.Sub(begin), took: last.Sub(begin)}
	r.inversions, r.displaced = startOrder(big, 0)
	return r, nil
}

// startOrder compares the order runs started in with their enqueue order:
// seq minus base is each task's place in it. It returns the pairs started
// out of that order and the most places a task started from its own.
func startOrder(runs []run, base int) (inversions, displaced int) {
	rs := slices.Clone(runs)
	slices.SortStableFunc(rs, func(a, b run) int { return a.Start.Compare(b.Start) })
	seqs := make([]int, len(rs))
	for i, r := range rs {
		seqs[i] = r.seq - base
		displaced = max(displaced, abs(i-seqs[i]))
	}
	return countInversions(seqs), displaced
}

// countInversions counts the pairs i < j with s[i] > s[j], by merge sort;
// it sorts s.
func countInversions(s []int) int {
	if len(s) < 2 {
		return 0
	}
	mid := len(s) / 2
	left, right := slices.Clone(s[:mid]), slices.Clone(s[mid:])
	n := countInversions(left) + countInversions(right)
	i, j := 0, 0
	for k := range s {
		if j == len(right) || (i < len(left) && left[i] <= right[j]) {
			s[k] = left[i]
			i++
			continue
		}
		n += len(left) - i // every left[i:] is above right[j] and before it
		s[k] = right[j]
		j++
	}
	return n
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// WriteText writes the report as a table: each figure's median over the
// runs and, with several runs, the spread of its ratio (or of its value,
// where it is compared with nothing), then the invariants checked and any
// that broke.
func (r FlowReport) WriteText(w io.Writer) error {
	c := r.Config
	fmt.Fprintf(w, "flow control beyond the tenant: fair pool of %d, %s, %d run(s); AGAINST is the same work without keys or without a pause\n", c.Concurrency, where(r.Masters), c.Runs)
	keyed := c.Tenants * c.PerTenant
	fmt.Fprintf(w, "keys: %d tenants, each with %d tasks carrying %s (MaxInFlight %d, across tenants) and %d carrying none, alternately, %s each, enqueued while the pool is held, then drained; against: no task carries a key. \"while both kinds wait\": from the first start until either kind's last start. On a saturated pool keyless tasks get the %d workers the key leaves, %.2f× their half without keys; the key's %d tasks alone take at least %.2fs\n",
		c.Tenants, c.PerTenant, sharedKey, c.KeyCap, c.PerTenant, fmtTask(c.Task), c.Concurrency-c.KeyCap,
		float64(c.Concurrency-c.KeyCap)/(float64(c.Concurrency)/2), keyed, (time.Duration(keyed) * c.Task / time.Duration(c.KeyCap)).Seconds())
	fmt.Fprintf(w, "Redis CPU: %d tasks of %s of one tenant, each carrying 1 or 3 keys (capped at %d, never reached), against none; INFO cpu from enqueue to the last task's end\n",
		c.CPUTasks, fmtTask(cpuTask), cpuKeyCap)
	fmt.Fprintf(w, "pause: a paused tenant's %d tasks of %s (beside a paused tenant capped at 1 with %d), resumed with RedisQuotas.Set from another client (workers see it within their quota refresh); against: the same tasks enqueued while the pool is held, then released (the held handlers start at once, in any order). Order: by start time in the handler, where two workers may start tasks moved together either way round\n\n",
		c.Paused, fmtTask(pauseTask), c.Ordered)
	rows := make([]measureRow, len(r.Measures))
	for i, m := range r.Measures {
		rows[i] = measureRow{name: m.Name, unit: m.Unit, target: m.Target, value: m.Value, against: m.Against}
	}
	if err := writeMeasures(w, [3]string{"VALUE", "AGAINST", "RATIO"}, rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(r.Violations) == 0 {
		_, err := fmt.Fprintf(w, "held in every run: %s\n", strings.Join(r.Checks, "; "))
		return err
	}
	fmt.Fprintf(w, "checked: %s\n", strings.Join(r.Checks, "; "))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "VIOLATED: %s\n", v)
	}
	return nil
}
