package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/worktime"
	"github.com/admitq/admitq/lua"
	aqworker "github.com/admitq/admitq/worker"
)

// Dispatch is the ID of the fair dispatcher's scenario (RunDispatch), which
// `admitq bench --only dispatch` runs instead of the throughput rows.
const Dispatch = "dispatch"

// DispatchConfig is the fair dispatcher's scenario: fair dispatch
// (worker.Config{Gate, Fair: true} with enqueue.Client producers) against
// bare asynq (asynq.Client and a plain asynq.Server) on one Redis or one
// Redis Cluster, in one run. Zero fields take the defaults in brackets.
type DispatchConfig struct {
	// Redis is the server to run on; nil starts a throwaway redis-server,
	// unless Cluster or StartCluster is set.
	Redis *redis.Options `json:"-"`
	// Cluster, when set and Redis is nil, runs on this Redis Cluster; and
	// StartCluster, when Redis and Cluster are nil, on a throwaway one of 3
	// masters. The queue's keys, asynq's and the dispatcher's, share one
	// slot, so its turns run on one master; the gate's keys spread over
	// all of them by tenant. Redis CPU and commands are summed over the
	// masters.
	Cluster      *redis.ClusterOptions `json:"-"`
	StartCluster bool                  `json:"-"`
	// Tasks is the backlog drained at 0, 1 and 2 ms a task
	// [DefaultDispatchTasks], and SlowTasks the one drained at 20 ms
	// [1,500].
	Tasks     int `json:"tasks"`
	SlowTasks int `json:"slow_tasks"`
	// Tenants is how many tenants share the no-op backlog of the drain
	// that many tenants take turns in [500].
	Tenants int `json:"tenants"`
	// Concurrency is the pool that drains at 0, 1 and 20 ms [64]; Workers
	// the pool of the light-tenant, capped-tenant and lone-tenant runs [16].
	Concurrency int `json:"concurrency"`
	Workers     int `json:"workers"`
	// Producers is the goroutines that enqueue a backlog [16]. EnqueueFor
	// is how long each producer-rate run calls Enqueue [1s], from one
	// goroutine and from Producers.
	Producers  int           `json:"producers"`
	EnqueueFor time.Duration `json:"enqueue_for_ns"`
	// Light is the light tenants [8], each sending a task every Every task
	// times [10] for LightFor [4s] beside one tenant's backlog.
	Light    int           `json:"light"`
	Every    int           `json:"every_task_times"`
	LightFor time.Duration `json:"light_for_ns"`
	// CapTasks is the capped tenant's backlog [400], MaxInFlight its cap [4].
	CapTasks    int `json:"cap_tasks"`
	MaxInFlight int `json:"max_in_flight"`
	// Runs is how many times the whole scenario runs [1]; the report gives
	// each ratio's spread over them.
	Runs int `json:"runs"`
	// Mix, when set, has the report give each drain's Redis commands per
	// task (DispatchReport.Mixes).
	Mix bool `json:"mix,omitempty"`
	// Progress, when set, hears what the scenario is doing.
	Progress func(string) `json:"-"`
}

// DefaultDispatchTasks is the backlog of the dispatcher scenario's drains
// at 0, 1 and 2 ms a task: ten tasks a tenant in the drain of 500
// tenants.
const DefaultDispatchTasks = 5000

func (c DispatchConfig) withDefaults() DispatchConfig {
	for _, f := range []struct {
		v *int
		d int
	}{
		{&c.Tasks, DefaultDispatchTasks}, {&c.SlowTasks, 1500}, {&c.Tenants, 500}, {&c.Concurrency, 64}, {&c.Workers, 16},
		{&c.Producers, 16}, {&c.Light, 8}, {&c.Every, 10},
		{&c.CapTasks, 400}, {&c.MaxInFlight, 4}, {&c.Runs, 1},
	} {
		if *f.v <= 0 {
			*f.v = f.d
		}
	}
	if c.LightFor <= 0 {
		c.LightFor = 4 * time.Second
	}
	if c.EnqueueFor <= 0 {
		c.EnqueueFor = time.Second
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	return c
}

// The task times of each part of the scenario.
var (
	drainTasks = []time.Duration{0, time.Millisecond, 20 * time.Millisecond}
	lightTasks = []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond}
	loneTasks  = []time.Duration{20 * time.Millisecond, 2 * time.Millisecond}
	// loneTargets are the design's targets for a lone tenant's drain
	// rate, by task time.
	loneTargets = map[time.Duration]string{20 * time.Millisecond: "≥ 0.95×", 2 * time.Millisecond: "≥ 0.85×"}
)

const capTask = 20 * time.Millisecond

// capSpread is how far the task times of the capped row with spread task
// times stray from capTask, as a fraction of it.
const capSpread = 0.25

// DispatchMeasure is one figure of the scenario, with a value per run.
type DispatchMeasure struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Fair is fair dispatch's value in each run; Bare bare asynq's, empty
	// where bare asynq has nothing to compare (it has no cap, and its light
	// tenants wait behind the whole backlog).
	Fair []float64 `json:"fair"`
	Bare []float64 `json:"bare,omitempty"`
	// Target is the design's target for this figure, if it has one: for
	// the ratio when Bare is set, else for the value.
	Target string `json:"target,omitempty"`
}

// Ratios returns Fair ÷ Bare for each run, or nil without Bare.
func (m DispatchMeasure) Ratios() []float64 { return ratios(m.Fair, m.Bare) }

// DispatchReport is the scenario's result.
type DispatchReport struct {
	Config   DispatchConfig    `json:"config"`
	Measures []DispatchMeasure `json:"measures"`
	// FrontStandIn names the stand-in this build runs in the place of
	// fair.lua's fronts (lua.FrontStandIn); empty in a normal build.
	FrontStandIn string `json:"front_stand_in,omitempty"`
	// DispatchStandIn names the stand-ins this build runs in the place of
	// the park and the turn (lua.DispatchStandIn); empty in a normal build.
	DispatchStandIn string `json:"dispatch_stand_in,omitempty"`
	// Masters is how many masters the Redis Cluster it ran on has; 0 on
	// one server.
	Masters int `json:"masters,omitempty"`
	// Mixes are, with DispatchConfig.Mix, the Redis commands of each drain
	// per task, in the last run.
	Mixes []DispatchMix `json:"mixes,omitempty"`
}

// DispatchMix is a drain's Redis commands per task (INFO commandstats):
// each command's calls and µs, busiest first; a script call's µs include
// those of the commands it ran.
type DispatchMix struct {
	Drain string `json:"drain"`
	Fair  string `json:"fair"`
	Bare  string `json:"bare"`
}

// mix records a drain's commands (the last run's, over the earlier).
func (r *DispatchReport) mix(drain string, fair, bare drained) {
	m := DispatchMix{Drain: drain, Fair: fair.mix, Bare: bare.mix}
	if i := slices.IndexFunc(r.Mixes, func(m DispatchMix) bool { return m.Drain == drain }); i >= 0 {
		r.Mixes[i] = m
		return
	}
	r.Mixes = append(r.Mixes, m)
}

// add records one run's value of a measure (and bare asynq's, if given).
func (r *DispatchReport) add(name, unit, target string, fair float64, bare ...float64) {
	i := slices.IndexFunc(r.Measures, func(m DispatchMeasure) bool { return m.Name == name })
	if i < 0 {
		r.Measures = append(r.Measures, DispatchMeasure{Name: name, Unit: unit, Target: target})
		i = len(r.Measures) - 1
	}
	m := &r.Measures[i]
	m.Fair = append(m.Fair, fair)
	m.Bare = append(m.Bare, bare...)
}

// RunDispatch measures fair dispatch against bare asynq on one Redis (or
// one Redis Cluster), with real workers: Redis's CPU and commands per task
// and the drain rate of a backlog; a producer's Enqueue rate; a light
// tenant's wait beside a backlog; how much of its cap a capped tenant uses;
// and a lone tenant's drain rate. Each pair runs back to back, in
// alternating order run by run.
func RunDispatch(ctx context.Context, cfg DispatchConfig) (DispatchReport, error) {
	cfg = cfg.withDefaults()
	rep := DispatchReport{Config: cfg, FrontStandIn: lua.FrontStandIn(), DispatchStandIn: lua.DispatchStandIn()}
	tg, done, err := scenarioTarget(ctx, cfg.Redis, cfg.Cluster, cfg.StartCluster)
	if err != nil {
		return rep, err
	}
	defer done()
	if rep.Masters, err = masters(ctx, tg.admin); err != nil {
		return rep, err
	}
	for i := range cfg.Runs {
		s := &dispatchRun{cfg: cfg, tg: tg, rep: &rep, bareFirst: i%2 == 0}
		if cfg.Runs > 1 {
			s.step = fmt.Sprintf("run %d/%d: ", i+1, cfg.Runs)
		}
		if err := s.all(ctx); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// dispatchRun is one run of the scenario.
type dispatchRun struct {
	cfg       DispatchConfig
	tg        *target
	rep       *DispatchReport
	bareFirst bool
	step      string // "run i/n: " when there are several
}

// all runs every part of the scenario once: with the dispatcher's
// stand-ins (DispatchReport.DispatchStandIn), only the parts that measure
// cost and speed, since their one line has no order by tenant and no cap.
func (s *dispatchRun) all(ctx context.Context) error {
	parts := []func(context.Context) error{s.drains, s.producers, s.lights, s.caps, s.lone}
	if s.rep.DispatchStandIn != "" {
		parts = []func(context.Context) error{s.drains, s.producers, s.lone}
	}
	for _, part := range parts {
		if err := part(ctx); err != nil {
			return err
		}
	}
	return nil
}

// drains: Redis's CPU and commands per task and the drain rate of one
// tenant's backlog.
func (s *dispatchRun) drains(ctx context.Context) error {
	for _, task := range drainTasks {
		fair, bare, err := s.drainPair(ctx, s.cfg.Concurrency, task)
		if err != nil {
			return err
		}
		at := ", " + fmtTask(task) + " tasks"
		if s.cfg.Mix {
			s.rep.mix(fmtTask(task)+" tasks", fair, bare)
		}
		s.rep.add("Redis CPU per task"+at, "µs", "≤ 2.0×", fair.cpu, bare.cpu)
		s.rep.add("Redis commands per task"+at, "calls", "", fair.commands, bare.commands)
		target := ""
		if task == 0 {
			target = "≥ 0.65×"
		}
		s.rep.add("drain rate"+at, "tasks/s", target, fair.rate, bare.rate)
	}
	var fair, bare drained
	err := s.pair(ctx, fmt.Sprintf("drain %d tasks of 0s over %d tenants with %d workers", s.cfg.Tasks, s.cfg.Tenants, s.cfg.Concurrency), func(ctx context.Context, f bool) error {
		d, err := s.drainPool(ctx, poolSpec{fair: f, workers: s.cfg.Concurrency, spread: s.cfg.Tenants}, s.cfg.Tasks)
		fair, bare = pick(f, d, fair, bare)
		return err
	})
	if err != nil {
		return err
	}
	at := fmt.Sprintf(", 0 ms tasks of %d tenants", s.cfg.Tenants)
	if s.cfg.Mix {
		s.rep.mix(at[2:], fair, bare)
	}
	s.rep.add("Redis CPU per task"+at, "µs", "≤ 2.0×", fair.cpu, bare.cpu)
	s.rep.add("Redis commands per task"+at, "calls", "", fair.commands, bare.commands)
	s.rep.add("drain rate"+at, "tasks/s", "≥ 0.65×", fair.rate, bare.rate)
	return nil
}

// producers: Enqueue calls per second, sequential and concurrent.
func (s *dispatchRun) producers(ctx context.Context) error {
	for _, goroutines := range []int{1, s.cfg.Producers} {
		var fair, bare float64
		if err := s.pair(ctx, fmt.Sprintf("Enqueue from %d goroutines", goroutines), func(ctx context.Context, f bool) error {
			r, err := s.produce(ctx, f, goroutines)
			fair, bare = pick(f, r, fair, bare)
			return err
		}); err != nil {
			return err
		}
		s.rep.add(fmt.Sprintf("Enqueue rate, %d goroutine%s", goroutines, map[bool]string{true: "s"}[goroutines > 1]), "calls/s", "≥ 0.45×", fair, bare)
	}
	return nil
}

// lights: light tenants' waits beside a backlog, in task times.
func (s *dispatchRun) lights(ctx context.Context) error {
	for _, task := range lightTasks {
		s.progress(fmt.Sprintf("light tenants beside a backlog, %v tasks", task))
		w, err := s.light(ctx, task)
		if err != nil {
			return fmt.Errorf("bench: light tenants, %v tasks: %w", task, err)
		}
		target := map[time.Duration]string{5 * time.Millisecond: "≤ 4", 20 * time.Millisecond: "≤ 2.5"}[task]
		at := ", " + fmtTask(task) + " tasks"
		s.rep.add("light wait p50"+at, "task times", "", w.p50)
		s.rep.add("light wait p99"+at, "task times", target, w.p99)
		s.rep.add("light wait max"+at, "task times", "", w.max)
	}
	return nil
}

// caps: how much of its cap a capped tenant uses. In the busy queue its
// neighbours' tasks all start at the release and take the same time, so
// the workers free in bursts, one a task time apart; the last row runs
// the same queue with task times spread over capTask ± capSpread, as real
// tasks' are, to show how much of what the cap misses the bursts cost.
func (s *dispatchRun) caps(ctx context.Context) error {
	share := float64(s.cfg.Workers) / 3
	for _, c := range []struct {
		name, target   string
		busy, capsOnly bool
		vary           float64
	}{
		{"alone", "≥ 71%", false, false, 0},
		{"alone, caps only (Gate without Fair)", "", false, true, 0},
		{fmt.Sprintf("busy queue (share %.1f)", share), "≥ 90%", true, false, 0},
		{fmt.Sprintf("busy queue (share %.1f), tasks of %s ± %.0f%%", share, fmtTask(capTask), 100*capSpread), "", true, false, capSpread},
	} {
		s.progress("a capped tenant, " + c.name)
		used, err := s.capped(ctx, c.busy, c.capsOnly, c.vary)
		if err != nil {
			return fmt.Errorf("bench: capped tenant, %s: %w", c.name, err)
		}
		s.rep.add(fmt.Sprintf("capped at %d, %s: share of cap used", s.cfg.MaxInFlight, c.name), "of cap", c.target, used)
	}
	return nil
}

// lone: a lone tenant's drain rate on the smaller pool.
func (s *dispatchRun) lone(ctx context.Context) error {
	for _, task := range loneTasks {
		fair, bare, err := s.drainPair(ctx, s.cfg.Workers, task)
		if err != nil {
			return err
		}
		s.rep.add("lone tenant's drain rate, "+fmtTask(task)+" tasks", "tasks/s", loneTargets[task], fair.rate, bare.rate)
	}
	return nil
}

// drainPair drains a backlog with bare asynq and with fair dispatch: Tasks
// of them, or SlowTasks of 20 ms and more.
func (s *dispatchRun) drainPair(ctx context.Context, workers int, task time.Duration) (fair, bare drained, err error) {
	n := s.cfg.Tasks
	if task >= 20*time.Millisecond {
		n = s.cfg.SlowTasks
	}
	err = s.pair(ctx, fmt.Sprintf("drain %d tasks of %v with %d workers", n, task, workers), func(ctx context.Context, f bool) error {
		d, err := s.drain(ctx, f, workers, task, n)
		fair, bare = pick(f, d, fair, bare)
		return err
	})
	return fair, bare, err
}

// pick stores v as the fair or the bare result.
func pick[T any](fair bool, v, f, b T) (T, T) {
	if fair {
		return v, b
	}
	return f, v
}

func (s *dispatchRun) progress(what string) { s.cfg.Progress(s.step + what) }

// pair runs f for bare asynq and for fair dispatch.
func (s *dispatchRun) pair(ctx context.Context, what string, f func(ctx context.Context, fair bool) error) error {
	order := []bool{true, false}
	if s.bareFirst {
		order = []bool{false, true}
	}
	for _, fair := range order {
		name := "bare asynq"
		if fair {
			name = "fair"
		}
		s.progress(what + ", " + name)
		if err := f(ctx, fair); err != nil {
			return fmt.Errorf("bench: %s, %s: %w", what, name, err)
		}
	}
	return nil
}

// drained is one backlog drained.
type drained struct {
	cpu      float64       // Redis CPU per task, µs, enqueue to done
	commands float64       // Redis commands per task
	rate     float64       // tasks started after the release, per second
	took     time.Duration // release to the last task's end
	mix      string        // the commands per task (commandMix)
}

// drain enqueues n tasks of one tenant while the pool's handlers are held,
// then lets the pool drain them.
func (s *dispatchRun) drain(ctx context.Context, fair bool, workers int, task time.Duration, n int) (drained, error) {
	return s.drainPool(ctx, poolSpec{fair: fair, workers: workers, task: task}, n)
}

// drainPool is drain on the pool spec describes, whose handlers it holds.
func (s *dispatchRun) drainPool(ctx context.Context, spec poolSpec, n int) (drained, error) {
	spec.hold = true
	workers, task := spec.workers, spec.task
	p, err := s.start(ctx, spec)
	if err != nil {
		return drained{}, err
	}
	defer p.close()
	before, err := s.stats(ctx)
	if err != nil {
		return drained{}, err
	}
	if err := p.backlog(ctx, spec.spread, n, s.cfg.Producers); err != nil {
		return drained{}, err
	}
	p.release()
	if err := p.wait(ctx, n*int(task+time.Millisecond)/workers*4, func(ended map[string]int) bool {
		sum := 0
		for _, e := range ended {
			sum += e
		}
		return sum >= n
	}); err != nil {
		return drained{}, err
	}
	after, err := s.stats(ctx)
	if err != nil {
		return drained{}, err
	}
	var calls int64
	for name, c := range after.cmds {
		calls += c.calls - before.cmds[name].calls
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, last := worktime.Span(workRuns(p.runs))
	took := last.Sub(p.released)
	return drained{
		cpu:      (after.cpu - before.cpu) * 1e6 / float64(n),
		commands: float64(calls) / float64(n),
		rate:     float64(n-p.held) / took.Seconds(),
		took:     took,
		mix:      commandMix(before, after, float64(n)),
	}, nil
}

// stats reads Redis's counters, summed over a cluster's masters.
func (s *dispatchRun) stats(ctx context.Context) (serverStats, error) {
	all, err := readAll(ctx, s.tg.admin)
	return sumStats(all), err
}

// produce measures Enqueue calls per second into a queue whose pool holds
// every handler: in a fair queue, past its depth every task waits its turn.
func (s *dispatchRun) produce(ctx context.Context, fair bool, goroutines int) (float64, error) {
	p, err := s.start(ctx, poolSpec{fair: fair, workers: s.cfg.Concurrency, hold: true})
	if err != nil {
		return 0, err
	}
	defer p.close()
	sent, took, err := p.enqueue(ctx, "producer", math.MaxInt, goroutines, time.Now().Add(s.cfg.EnqueueFor))
	return float64(sent) / took.Seconds(), err
}

// waits are light tasks' waits from Enqueue to start, in task times.
type waits struct{ p50, p99, max float64 }

// light runs a fair pool with one tenant's backlog while Light tenants send
// a task every Every task times each.
func (s *dispatchRun) light(ctx context.Context, task time.Duration) (waits, error) {
	cfg := s.cfg
	p, err := s.start(ctx, poolSpec{fair: true, workers: cfg.Workers, task: task, hold: true})
	if err != nil {
		return waits{}, err
	}
	defer p.close()
	// Enough to keep every worker busy while the light tenants send.
	backlog := int(cfg.LightFor/task)*cfg.Workers*5/4 + 2*cfg.Workers
	if err := p.fill(ctx, "noisy", backlog); err != nil {
		return waits{}, err
	}
	p.release()
	begin := time.Now()
	every := task * time.Duration(cfg.Every)
	var sent atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Light)
	for i := range cfg.Light {
		wg.Go(func() {
			tenant := "light" + strconv.Itoa(i)
			for at := begin.Add(every * time.Duration(i) / time.Duration(cfg.Light)); at.Before(begin.Add(cfg.LightFor)); at = at.Add(every) {
				if err := sleepUntil(ctx, at); err != nil {
					errs <- err
					return
				}
				if err := p.send(ctx, tenant, asynq.NewTask("light", stamp())); err != nil {
					errs <- err
					return
				}
				sent.Add(1)
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return waits{}, err
	default:
	}
	lightEnded := func(ended map[string]int) bool {
		n := 0
		for t, e := range ended {
			if t != "noisy" {
				n += e
			}
		}
		return n >= int(sent.Load())
	}
	if err := p.wait(ctx, backlog*int(task)/cfg.Workers*2, lightEnded); err != nil {
		return waits{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var ws []float64
	for _, r := range p.runs {
		if r.Tenant != "noisy" {
			ws = append(ws, float64(r.Start.Sub(r.queued))/float64(task))
		}
	}
	if len(ws) == 0 {
		return waits{}, fmt.Errorf("no light task ran (LightFor %v is shorter than a light tenant's first send)", cfg.LightFor)
	}
	slices.Sort(ws)
	n := len(ws)
	return waits{p50: ws[n/2], p99: ws[min(n-1, n*99/100)], max: ws[n-1]}, nil
}

// cappedTenant is the tenant whose quota has MaxInFlight.
const cappedTenant = "capped"

// capped returns the mean of a capped tenant's running tasks over its cap,
// over the time it has tasks waiting: alone, or beside two uncapped
// tenants with backlogs, where its fair share of the pool is a third. With
// capsOnly the queue caps and does not share; vary is poolSpec's.
//
// The mean is the exact one, its tasks' running time over that span
// (capShare). Sampling the count every 2 ms read 0.4 to 3 points lower in
// each of 120 runs: the sampler runs late while the process is busy, which
// it is most while the tenant hands a place from one task to the next.
func (s *dispatchRun) capped(ctx context.Context, busy, capsOnly bool, vary float64) (float64, error) {
	cfg := s.cfg
	p, err := s.start(ctx, poolSpec{fair: true, capsOnly: capsOnly, workers: cfg.Workers, task: capTask, vary: vary,
		hold: true, maxInFlight: cfg.MaxInFlight})
	if err != nil {
		return 0, err
	}
	defer p.close()
	backlogs := map[string]int{cappedTenant: cfg.CapTasks}
	if busy {
		// Each gets about (Workers−MaxInFlight)/2 workers; 3× the capped
		// tenant's backlog outlasts it.
		backlogs["busy1"], backlogs["busy2"] = 3*cfg.CapTasks, 3*cfg.CapTasks
	}
	for t, n := range backlogs {
		if err := p.fill(ctx, t, n); err != nil {
			return 0, err
		}
	}
	p.release()
	if err := p.wait(ctx, cfg.CapTasks*int(capTask)/cfg.MaxInFlight*4, func(ended map[string]int) bool {
		return ended[cappedTenant] >= cfg.CapTasks
	}); err != nil {
		return 0, fmt.Errorf("the capped tenant's %d tasks: %w", cfg.CapTasks, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return capShare(workRuns(p.runs), cappedTenant, cfg.MaxInFlight, p.released), nil
}

// capShare returns the mean number of tenant's tasks running (runs of
// Tenant tenant: a tenant, or a class of tasks), over its places (its cap),
// from from until the end of the task after which only places more were
// left to end: their running time in that span over places times its
// length. Until then the tenant had tasks waiting.
func capShare(runs []worktime.Run, tenant string, places int, from time.Time) float64 {
	var ends []time.Time
	for _, r := range runs {
		if r.Tenant == tenant {
			ends = append(ends, r.End)
		}
	}
	if len(ends) <= places {
		return 0
	}
	slices.SortFunc(ends, time.Time.Compare)
	to := ends[len(ends)-places-1]
	if !to.After(from) {
		return 0
	}
	used := worktime.Used(runs, from, to)[tenant]
	return float64(used) / float64(time.Duration(places)*to.Sub(from))
}

// poolSpec is a pool of workers to measure.
type poolSpec struct {
	fair     bool // admitq's fair workers and producers; else bare asynq's
	capsOnly bool // with fair: worker.Config{Gate} without Fair
	workers  int
	task     time.Duration // how long each handler runs
	// vary, when set, spreads task times evenly over task ± vary×task,
	// each task's from a hash of its ID.
	vary        float64
	hold        bool // handlers wait for release
	maxInFlight int  // the capped tenant's cap; 0 is none
	// keys are the quotas of concurrency keys (admission.StaticQuotas.Keys).
	keys map[string]admission.Quota
	// tenants, when set, are written to a RedisQuotas that the gate reads,
	// beside the default, so that a quota may change while the pool runs.
	tenants map[string]admission.Quota
	// taskOpts go with every task the pool's enqueue sends.
	taskOpts []asynq.Option
	// spread, when set, is how many tenants a drain's backlog takes turns
	// among (drainPool); else it is one tenant's.
	spread int
}

// server is an asynq.Server or a worker.Worker.
type server interface {
	Stop()
	Shutdown()
}

// pool is a running pool of workers, fair or bare, with its producers. Its
// handler records each run; while held, handlers wait for release.
type pool struct {
	fair   bool
	task   time.Duration
	vary   float64 // poolSpec.vary
	rdb    redis.UniversalClient
	srv    server
	gate   *admission.Gate
	client *enqueue.Client // fair
	bare   *asynq.Client   // bare
	opts   []asynq.Option  // poolSpec.taskOpts

	hold     chan struct{}
	once     sync.Once
	mu       sync.Mutex
	runs     []run
	running  map[string]int // by tenant: handlers in the task now
	ended    map[string]int // by tenant: tasks run
	released time.Time
	held     int // handlers waiting at the release
	// By concurrency key, of tasks whose payload names their keys
	// (labelled): handlers in the task now, and the most there were.
	keyRunning, keyPeak map[string]int
}

// start starts a pool on a client of its own, on a Redis cleared of what
// the pools before left (a backlog's rest, the dispatcher's state). A fair
// pool returns once producers see its workers.
func (s *dispatchRun) start(ctx context.Context, spec poolSpec) (*pool, error) {
	if err := cleanup(ctx, s.tg.admin); err != nil {
		return nil, err
	}
	rdb := s.tg.client(2*spec.workers + s.cfg.Producers + 8)
	p := &pool{fair: spec.fair, task: spec.task, vary: spec.vary, rdb: rdb, opts: spec.taskOpts, hold: make(chan struct{}),
		running: map[string]int{}, ended: map[string]int{}, keyRunning: map[string]int{}, keyPeak: map[string]int{}}
	if !spec.hold {
		p.release()
	}
	if !spec.fair {
		p.bare = asynq.NewClientFromRedisClient(rdb)
		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
			Concurrency: spec.workers, Queues: map[string]int{queue: 1},
			TaskCheckInterval: 10 * time.Millisecond, ShutdownTimeout: time.Second, LogLevel: asynq.FatalLevel,
		})
		if err := srv.Start(p); err != nil {
			rdb.Close()
			return nil, err
		}
		p.srv = srv
		return p, nil
	}
	def := admission.Quota{Limit: 100_000, Window: time.Second, MaxParked: admission.MaxParkedCap}
	capped := def
	capped.MaxInFlight = spec.maxInFlight
	var quotas admission.Quotas = admission.StaticQuotas{Default: &def, Tenants: map[string]admission.Quota{cappedTenant: capped}, Keys: spec.keys}
	if spec.tenants != nil {
		rq := admission.NewRedisQuotas(rdb, admission.WithPrefix(Prefix))
		err := rq.SetDefault(ctx, def)
		for t, q := range spec.tenants {
			if err == nil {
				err = rq.Set(ctx, t, q)
			}
		}
		for k, q := range spec.keys {
			if err == nil {
				err = rq.SetKey(ctx, k, q)
			}
		}
		if err != nil {
			rdb.Close()
			return nil, fmt.Errorf("writing the pool's quotas: %w", err)
		}
		quotas = rq
	}
	p.gate = admission.New(rdb, quotas, admission.WithPrefix(Prefix), admission.WithTimeout(2*time.Second))
	p.client = enqueue.NewFromRedis(rdb, p.gate)
	w := aqworker.NewFromRedis(rdb, aqworker.Config{
		Concurrency: spec.workers, Queues: map[string]int{queue: 1},
		TaskCheckInterval: 10 * time.Millisecond, ShutdownTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler), Gate: p.gate, Fair: !spec.capsOnly,
	})
	if err := w.Start(p); err != nil {
		p.gate.Close()
		rdb.Close()
		return nil, err
	}
	p.srv = w
	// Producers see a queue's workers within a second.
	if err := sleepUntil(ctx, time.Now().Add(1100*time.Millisecond)); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// ProcessTask runs a task: it waits for the release, sleeps the task time
// and records the run. A held handler counts as running, for its tenant
// and its keys: asynq holds the task as active.
func (p *pool) ProcessTask(ctx context.Context, t *asynq.Task) error {
	r := readPayload(t.Payload())
	r.Tenant = t.Headers()[enqueue.TenantHeader]
	p.mu.Lock()
	p.running[r.Tenant]++
	for _, k := range r.keys {
		p.keyRunning[k]++
		p.keyPeak[k] = max(p.keyPeak[k], p.keyRunning[k])
	}
	p.mu.Unlock()
	leave := func() {
		p.running[r.Tenant]--
		for _, k := range r.keys {
			p.keyRunning[k]--
		}
	}
	select {
	case <-p.hold:
	case <-ctx.Done():
		p.mu.Lock()
		leave()
		p.mu.Unlock()
		return ctx.Err()
	}
	r.Start = time.Now()
	if d := p.taskTime(t.ResultWriter().TaskID()); d > 0 {
		time.Sleep(d)
	}
	r.End = time.Now()
	p.mu.Lock()
	leave()
	p.ended[r.Tenant]++
	p.runs = append(p.runs, r)
	p.mu.Unlock()
	return nil
}

// taskTime is how long task id runs: the pool's task time, spread by
// vary with a fraction drawn from the ID's hash.
func (p *pool) taskTime(id string) time.Duration {
	if p.vary == 0 {
		return p.task
	}
	h := fnv.New64a()
	_, _ = io.WriteString(h, id)
	u := float64(h.Sum64()>>11) / (1 << 53) // [0, 1)
	return time.Duration(float64(p.task) * (1 + p.vary*(2*u-1)))
}

// release lets held handlers run, once.
func (p *pool) release() {
	p.once.Do(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.released = time.Now()
		for _, n := range p.running {
			p.held += n
		}
		close(p.hold)
	})
}

func (p *pool) close() {
	p.srv.Stop()
	p.release()
	p.srv.Shutdown()
	if p.gate != nil {
		p.gate.Close()
	}
	p.rdb.Close()
}

// send enqueues one task for tenant, as the pool's producers do.
func (p *pool) send(ctx context.Context, tenant string, t *asynq.Task) error {
	if p.fair {
		_, _, err := p.client.Enqueue(ctx, tenant, t, append([]asynq.Option{asynq.Queue(queue)}, p.opts...)...)
		return err
	}
	_, err := p.bare.EnqueueContext(ctx, asynq.NewTaskWithHeaders(t.Type(), t.Payload(), map[string]string{enqueue.TenantHeader: tenant}), asynq.Queue(queue))
	return err
}

// enqueue sends tasks for tenant, one Enqueue each, from goroutines at
// once: n of them, or as many as it can before until when that is not
// zero. It returns how many it sent and how long that took.
func (p *pool) enqueue(ctx context.Context, tenant string, n, goroutines int, until time.Time) (int, time.Duration, error) {
	var next, sent atomic.Int64
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	begin := time.Now()
	for range goroutines {
		wg.Go(func() {
			for next.Add(1) <= int64(n) && (until.IsZero() || time.Now().Before(until)) {
				if err := p.send(ctx, tenant, asynq.NewTask("bench", stamp())); err != nil {
					errs <- err
					return
				}
				sent.Add(1)
			}
		})
	}
	wg.Wait()
	took := time.Since(begin)
	select {
	case err := <-errs:
		return 0, 0, fmt.Errorf("enqueueing for %s: %w", tenant, err)
	default:
		return int(sent.Load()), took, nil
	}
}

// backlog sends n tasks from goroutines at once, one Enqueue each: one
// tenant's ("solo") when spread is 0, else spread tenants' in turn.
func (p *pool) backlog(ctx context.Context, spread, n, goroutines int) error {
	if spread == 0 {
		_, _, err := p.enqueue(ctx, "solo", n, goroutines, time.Time{})
		return err
	}
	var next atomic.Int64
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if err := p.send(ctx, "t"+strconv.FormatInt(i%int64(spread), 10), asynq.NewTask("bench", stamp())); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("enqueueing a backlog over %d tenants: %w", spread, err)
	default:
		return nil
	}
}

// fill sends a fair pool's tenant a backlog of n tasks, in batches.
func (p *pool) fill(ctx context.Context, tenant string, n int) error {
	ts := make([]*asynq.Task, n)
	for i := range ts {
		ts[i] = asynq.NewTask("backlog", stamp())
	}
	return p.fillTasks(ctx, tenant, ts)
}

// fillTasks sends a fair pool's tenant the given tasks in order, in
// batches.
func (p *pool) fillTasks(ctx context.Context, tenant string, ts []*asynq.Task) error {
	const batch = 250
	for from := 0; from < len(ts); from += batch {
		rs, err := p.client.EnqueueBatch(ctx, tenant, ts[from:min(from+batch, len(ts))], asynq.Queue(queue))
		if err != nil {
			return fmt.Errorf("enqueueing %s's backlog: %w", tenant, err)
		}
		for _, r := range rs {
			if r.Err != nil {
				return fmt.Errorf("enqueueing %s's backlog: %w", tenant, r.Err)
			}
		}
	}
	return nil
}

// wait waits until done holds for the tasks ended so far, by tenant, for
// at most the given time plus 30 s.
func (p *pool) wait(ctx context.Context, within int, done func(ended map[string]int) bool) error {
	timeout := time.After(time.Duration(within) + 30*time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		p.mu.Lock()
		ok, ran := done(p.ended), len(p.runs)
		p.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			return fmt.Errorf("only %d tasks ran in time", ran)
		case <-tick.C:
		}
	}
}

// stamp is a task's payload: its enqueue time.
func stamp() []byte { return binary.BigEndian.AppendUint64(nil, uint64(time.Now().UnixNano())) }

// labelled is the payload of a task that says more than its enqueue time
// (stamp): its number, unique in its pool; its class, which a scenario
// reads its figures by; and the concurrency keys it carries, which the
// handler counts running tasks by. class must not hold "|".
func labelled(seq int, class string, keys ...string) []byte {
	b := binary.BigEndian.AppendUint64(stamp(), uint64(seq))
	return append(b, class+"|"+strings.Join(keys, ",")...)
}

// readPayload reads a stamp or labelled payload into a run; a task with
// neither has a zero queued time and seq -1.
func readPayload(b []byte) run {
	r := run{seq: -1}
	if len(b) < 8 {
		return r
	}
	r.queued = time.Unix(0, int64(binary.BigEndian.Uint64(b)))
	if len(b) < 16 {
		return r
	}
	r.seq = int(binary.BigEndian.Uint64(b[8:]))
	class, keys, _ := strings.Cut(string(b[16:]), "|")
	r.class = class
	if keys != "" {
		r.keys = strings.Split(keys, ",")
	}
	return r
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// WriteText writes the report as a table: each figure's median over the
// runs and, with several runs, the spread of its ratio (or of its value,
// where bare asynq has none).
func (r DispatchReport) WriteText(w io.Writer) error {
	c := r.Config
	fmt.Fprintf(w, "fair dispatch against bare asynq, %s, %d run(s)\n", where(r.Masters), c.Runs)
	if r.FrontStandIn != "" {
		fmt.Fprintf(w, "fair.lua's fronts replaced by %s: every capped tenant's grant goes to the front, a floor, not the rule\n", r.FrontStandIn)
	}
	if r.DispatchStandIn != "" {
		fmt.Fprintf(w, "the park and the turn replaced by %s: one first-in-first-out line per queue, the least a park, a grant, a move and a finish must do; a floor for cost, not a rule (no light-tenant or cap rows)\n", r.DispatchStandIn)
	}
	fmt.Fprintf(w, "drain: %d tasks (%d at 20 ms) of one tenant, and %d no-op tasks of %d tenants in turn, enqueued by %d goroutines while %d workers are held, then drained; Redis CPU and commands from enqueue to the last task's end\n",
		c.Tasks, c.SlowTasks, c.Tasks, c.Tenants, c.Producers, c.Concurrency)
	fmt.Fprintf(w, "Enqueue: calls for %v into a queue whose %d workers are all held (a fair queue at its depth: each task waits its turn)\n", c.EnqueueFor, c.Concurrency)
	fmt.Fprintf(w, "light wait: enqueue to start, fair pool of %d, %d light tenants each sending every %d task times for %v beside a backlog (about %d waits at 200 ms)\n",
		c.Workers, c.Light, c.Every, c.LightFor, c.Light*int(c.LightFor/(200*time.Millisecond*time.Duration(c.Every))))
	fmt.Fprintf(w, "capped: mean running ÷ cap while it has tasks waiting (its running time over cap × span), 20 ms tasks, fair pool of %d. lone tenant: the drain above with %d workers\n\n",
		c.Workers, c.Workers)
	rows := make([]measureRow, len(r.Measures))
	for i, m := range r.Measures {
		rows[i] = measureRow{name: m.Name, unit: m.Unit, target: m.Target, value: m.Fair, against: m.Bare}
	}
	if err := writeMeasures(w, [3]string{"FAIR", "BARE", "FAIR÷BARE"}, rows); err != nil {
		return err
	}
	if len(r.Mixes) > 0 {
		fmt.Fprintf(w, "\nRedis commands per task of each drain, the last run's (INFO commandstats; a script call's µs include its commands'):\n")
	}
	for _, m := range r.Mixes {
		if _, err := fmt.Fprintf(w, "%s, fair: %s\n%s, bare: %s\n", m.Drain, m.Fair, m.Drain, m.Bare); err != nil {
			return err
		}
	}
	return nil
}

// where says what a scenario ran on: one server, or a cluster of masters
// masters.
func where(masters int) string {
	if masters == 0 {
		return "on one Redis"
	}
	return fmt.Sprintf("on a Redis Cluster of %d masters (the queue's keys in one slot; Redis CPU and commands summed over the masters)", masters)
}

// measureRow is one figure of a scenario: its value in each run and, where
// it has one, what it is compared with in each run.
type measureRow struct {
	name, unit, target string
	value, against     []float64
}

// ratios returns value ÷ against run by run, 0 where against is not above
// 0; nil without against.
func ratios(value, against []float64) []float64 {
	if len(against) == 0 {
		return nil
	}
	out := make([]float64, len(value))
	for i, v := range value {
		if i < len(against) && against[i] > 0 {
			out[i] = v / against[i]
		}
	}
	return out
}

// writeMeasures writes rows as a table whose value, compared-value and
// ratio columns have the given heads: each figure's median over the runs
// and, with several runs, the spread of its ratio (or of its value, where
// it is compared with nothing, or with 0).
func writeMeasures(w io.Writer, heads [3]string, rows []measureRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "MEASURE\t%s\t%s\t%s\tSPREAD\tTARGET\n", heads[0], heads[1], heads[2])
	for _, m := range rows {
		against, ratio, spread := "-", "-", "-"
		vals := m.value
		if len(m.against) > 0 {
			against = fmtUnit(median(m.against), m.unit)
			if slices.Min(m.against) > 0 {
				vals = ratios(m.value, m.against)
				ratio = fmt.Sprintf("%.2f×", median(vals))
			}
		}
		if len(vals) > 1 {
			spread = fmt.Sprintf("%.2f–%.2f", slices.Min(vals), slices.Max(vals))
			if isShare(m.unit) && len(vals) > 0 && ratio == "-" {
				spread = fmt.Sprintf("%.0f–%.0f%%", 100*slices.Min(vals), 100*slices.Max(vals))
			}
		}
		target := m.target
		if target == "" {
			target = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.name, fmtUnit(median(m.value), m.unit), against, ratio, spread, target)
	}
	return tw.Flush()
}

// fmtTask writes a task time in milliseconds, the unit the design's
// targets use: "0 ms", "20 ms".
func fmtTask(d time.Duration) string { return fmt.Sprintf("%g ms", float64(d)/1e6) }

// isShare reports whether unit is a share, written as a percentage.
func isShare(unit string) bool { return strings.HasPrefix(unit, "of ") }

func fmtUnit(v float64, unit string) string {
	if isShare(unit) {
		return fmt.Sprintf("%.0f%%", 100*v)
	}
	switch unit {
	case "tasks", "pairs", "places":
		return fmt.Sprintf("%.0f", v)
	case "tasks/s", "calls/s":
		return fmt.Sprintf("%.0f %s", v, unit)
	case "task times":
		return fmt.Sprintf("%.2f", v)
	case "s":
		return fmt.Sprintf("%.2fs", v)
	}
	return strings.TrimSpace(fmt.Sprintf("%.1f %s", v, unit))
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
