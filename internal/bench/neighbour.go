package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/worktime"
	aqworker "github.com/admitq/admitq/worker"
)

// Neighbour is the ID of the noisy-neighbour scenario (RunNeighbour), which
// `admitq bench --only neighbour` runs instead of the throughput rows.
const Neighbour = "neighbour"

// NeighbourConfig is the noisy-neighbour scenario: one tenant with a large
// backlog and many light tenants share one pool of real asynq workers.
// Zero fields take the defaults in brackets.
type NeighbourConfig struct {
	// Redis is the server to run on; nil starts a throwaway redis-server.
	Redis *redis.Options
	// Backlog is the noisy tenant's tasks, enqueued at once [10,000].
	Backlog int
	// Light is the number of light tenants [20], each sending a task every
	// Every [200ms] for Duration [10s].
	Light    int
	Every    time.Duration
	Duration time.Duration
	// Task is how long a task runs [20ms]; Concurrency the workers [8].
	Task        time.Duration
	Concurrency int
	// Rate is every tenant's quota per second in the admitq rows [500]:
	// more than the pool's capacity, as quotas sold per tenant are.
	Rate int
	// MaxInFlight is every tenant's cap in the depth row [4].
	MaxInFlight int
	// Progress, when set, hears what the scenario is doing.
	Progress func(string)
}

func (c NeighbourConfig) withDefaults() NeighbourConfig {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Backlog, 10_000)
	def(&c.Light, 20)
	defD(&c.Every, 200*time.Millisecond)
	defD(&c.Duration, 10*time.Second)
	defD(&c.Task, 20*time.Millisecond)
	def(&c.Concurrency, 8)
	def(&c.Rate, 500)
	def(&c.MaxInFlight, 4)
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	return c
}

// NeighbourRow is one contender of the scenario.
type NeighbourRow struct {
	Name string `json:"name"`
	// The light tenants' waits, from Enqueue to the start of the task.
	LightP50 time.Duration `json:"light_p50_ns"`
	LightP99 time.Duration `json:"light_p99_ns"`
	LightMax time.Duration `json:"light_max_ns"`
	// LightTasks is how many light tasks were sent (all of them started).
	LightTasks int `json:"light_tasks"`
	// Jain is Jain's fairness index of the worker time each tenant got
	// while the light tenants sent, each divided by its max-min fair share
	// of the pool: 1 is perfectly fair, 1/(tenants) is one tenant taking all.
	Jain float64 `json:"jain"`
	// NoisyPerSecond is the noisy tenant's tasks run per second meanwhile,
	// and Busy the share of the pool's worker time that was used.
	NoisyPerSecond float64 `json:"noisy_per_second"`
	Busy           float64 `json:"busy"`
}

// NeighbourReport is the scenario's result, one row per contender.
type NeighbourReport struct {
	Config NeighbourConfig `json:"-"`
	Rows   []NeighbourRow  `json:"rows"`
	// Alone is one tenant's backlog drained by bare asynq and by a fair
	// pool: tasks per second from the first start to the last end.
	Alone struct {
		Tasks int     `json:"tasks"`
		Bare  float64 `json:"bare_per_second"`
		Fair  float64 `json:"fair_per_second"`
	} `json:"alone"`
	// Weights is two tenants at weights 3 and 1 with a backlog each on a
	// fair pool: the first's worker time over the second's while both wait.
	Weights struct {
		Tasks int     `json:"tasks"`
		Ratio float64 `json:"ratio"`
	} `json:"weights"`
}

// run is one task run, as the handler saw it.
type run struct {
	worktime.Run
	queued time.Time
	// From a labelled payload: the task's number in its pool (-1 for
	// none), its class and its keys.
	seq   int
	class string
	keys  []string
}

// workRuns returns runs as worktime measures them.
func workRuns(runs []run) []worktime.Run {
	out := make([]worktime.Run, len(runs))
	for i, r := range runs {
		out[i] = r.Run
	}
	return out
}

// neighbourContender enqueues tasks one way.
type neighbourContender struct {
	name   string
	quota  *admission.Quota // nil: bare asynq, no gate
	capped bool             // the workers run with the gate
	fair   bool             // the workers' queue is fair (with the gate)
	// light is the light tenants' quota, when not quota.
	light *admission.Quota
}

// scenarioTarget gives a scenario that runs on a cluster too its Redis:
// the server single names, else the cluster cluster names, else a
// throwaway cluster of 3 masters when startCluster is set, else a
// throwaway redis-server. done removes the scenario's keys, closes the
// admin client and stops what it started.
func scenarioTarget(ctx context.Context, single *redis.Options, cluster *redis.ClusterOptions, startCluster bool) (_ *target, done func(), err error) {
	tg, err := connect(ctx, Config{Redis: single, Cluster: cluster, StartCluster: startCluster})
	if err != nil {
		return nil, nil, err
	}
	return tg, func() {
		_ = cleanup(ctx, tg.admin)
		tg.close()
	}, nil
}

// RunNeighbour runs the noisy-neighbour scenario for bare asynq, admitq
// with rate limits only and admitq with MaxInFlight, one after another on
// one Redis, with real asynq workers.
func RunNeighbour(ctx context.Context, cfg NeighbourConfig) (NeighbourReport, error) {
	cfg = cfg.withDefaults()
	rep := NeighbourReport{Config: cfg}
	tg, done, err := scenarioTarget(ctx, cfg.Redis, nil, false)
	if err != nil {
		return rep, err
	}
	defer done()
	opts, admin := tg.single, tg.admin
	rate := admission.Quota{Limit: cfg.Rate, Window: time.Second, MaxDelay: time.Duration(cfg.Backlog/cfg.Rate+60) * time.Second}
	capped := rate
	capped.MaxInFlight, capped.MaxParked = cfg.MaxInFlight, cfg.Backlog+cfg.Light*1000
	heavy := rate
	heavy.Weight = 3
	for _, c := range []neighbourContender{
		{name: "asynq (bare)"},
		{name: fmt.Sprintf("admitq, rate only (%d/s each)", cfg.Rate), quota: &rate},
		{name: fmt.Sprintf("admitq, MaxInFlight %d", cfg.MaxInFlight), quota: &capped, capped: true},
		{name: "admitq, fair", quota: &rate, capped: true, fair: true},
		{name: "admitq, fair, light weight 3", quota: &rate, capped: true, fair: true, light: &heavy},
	} {
		if err := cleanup(ctx, admin); err != nil {
			return rep, err
		}
		cfg.Progress(c.name)
		row, err := runNeighbour(ctx, cfg, opts, c)
		if err != nil {
			return rep, fmt.Errorf("bench: %s: %w", c.name, err)
		}
		rep.Rows = append(rep.Rows, row)
	}
	n := min(cfg.Backlog, 2000)
	rep.Alone.Tasks, rep.Weights.Tasks = n, n
	for _, fair := range []bool{false, true} {
		if err := cleanup(ctx, admin); err != nil {
			return rep, err
		}
		cfg.Progress(fmt.Sprintf("a tenant alone (fair %v)", fair))
		runs, err := runBacklogs(ctx, cfg, opts, map[string]float64{"solo": 1}, n, fair)
		if err != nil {
			return rep, fmt.Errorf("bench: alone: %w", err)
		}
		first, last := worktime.Span(workRuns(runs))
		perSecond := float64(len(runs)) / last.Sub(first).Seconds()
		if fair {
			rep.Alone.Fair = perSecond
		} else {
			rep.Alone.Bare = perSecond
		}
	}
	if err := cleanup(ctx, admin); err != nil {
		return rep, err
	}
	cfg.Progress("weights 3:1")
	runs, err := runBacklogs(ctx, cfg, opts, map[string]float64{"gold": 3, "basic": 1}, n, true)
	if err != nil {
		return rep, fmt.Errorf("bench: weights: %w", err)
	}
	rep.Weights.Ratio = worktime.Ratio(workRuns(runs), "gold", "basic")
	return rep, nil
}

// runBacklogs starts a pool (fair with a gate, or bare asynq), enqueues n
// tasks for each tenant at once (at the weights given; through the gate
// for a fair pool), and returns every run once all have run.
func runBacklogs(ctx context.Context, cfg NeighbourConfig, opts *redis.Options, weights map[string]float64, n int, fair bool) ([]run, error) {
	rdb := redis.NewClient(withPool(opts, 64))
	defer rdb.Close()
	def := admission.Quota{Limit: 100_000, Window: time.Second, MaxParked: admission.MaxParkedCap}
	quotas := admission.StaticQuotas{Default: &def, Tenants: map[string]admission.Quota{}}
	for t, wt := range weights {
		q := def
		q.Weight = wt
		quotas.Tenants[t] = q
	}
	gate := admission.New(rdb, quotas, admission.WithPrefix(Prefix), admission.WithTimeout(2*time.Second))
	defer gate.Close()
	var mu sync.Mutex
	var runs []run
	wcfg := aqworker.Config{
		Concurrency: cfg.Concurrency, Queues: map[string]int{queue: 1},
		TaskCheckInterval: 10 * time.Millisecond, ShutdownTimeout: time.Second,
		Logger: slog.New(slog.DiscardHandler),
	}
	if fair {
		wcfg.Gate, wcfg.Fair = gate, true
	}
	w := aqworker.NewFromRedis(rdb, wcfg)
	if err := w.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		start := time.Now()
		time.Sleep(cfg.Task)
		mu.Lock()
		runs = append(runs, run{Run: worktime.Run{Tenant: aqworker.Tenant(ctx), Start: start, End: time.Now()}})
		mu.Unlock()
		return nil
	})); err != nil {
		return nil, err
	}
	defer w.Shutdown()
	if fair {
		time.Sleep(1100 * time.Millisecond) // producers see the fair workers
	}
	client := enqueue.NewFromRedis(rdb, gate)
	bare := asynq.NewClientFromRedisClient(rdb)
	var wg sync.WaitGroup
	errs := make(chan error, len(weights))
	for tenant := range weights {
		wg.Go(func() {
			for range n {
				t := asynq.NewTask("backlog", nil)
				var err error
				if fair {
					_, _, err = client.Enqueue(ctx, tenant, t, asynq.Queue(queue))
				} else {
					_, err = bare.EnqueueContext(ctx, asynq.NewTaskWithHeaders("backlog", nil, map[string]string{enqueue.TenantHeader: tenant}), asynq.Queue(queue))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	deadline := time.Now().Add(time.Duration(n*len(weights))*cfg.Task/time.Duration(cfg.Concurrency)*3 + 30*time.Second)
	for {
		mu.Lock()
		done := len(runs) >= n*len(weights)
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d tasks never ran", n*len(weights)-len(runs))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	w.Shutdown()
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(runs), nil
}

func runNeighbour(ctx context.Context, cfg NeighbourConfig, opts *redis.Options, c neighbourContender) (NeighbourRow, error) {
	rdb := redis.NewClient(withPool(opts, 64))
	defer rdb.Close()
	var gate *admission.Gate
	var client *enqueue.Client
	if c.quota != nil {
		quotas := admission.StaticQuotas{Default: c.quota}
		if c.light != nil {
			quotas.Tenants = map[string]admission.Quota{}
			for i := range cfg.Light {
				quotas.Tenants["light"+strconv.Itoa(i)] = *c.light
			}
		}
		gate = admission.New(rdb, quotas, admission.WithPrefix(Prefix))
		defer gate.Close()
		client = enqueue.NewFromRedis(rdb, gate)
	}
	bare := asynq.NewClientFromRedisClient(rdb)

	send := func(ctx context.Context, tenant string, tasks []*asynq.Task) error {
		if client == nil {
			for _, t := range tasks {
				if _, err := bare.EnqueueContext(ctx, asynq.NewTaskWithHeaders(t.Type(), t.Payload(), map[string]string{enqueue.TenantHeader: tenant}), asynq.Queue(queue)); err != nil {
					return err
				}
			}
			return nil
		}
		rs, err := client.EnqueueBatch(ctx, tenant, tasks, asynq.Queue(queue))
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Err != nil {
				return r.Err
			}
		}
		return nil
	}

	// The noisy backlog, in batches, from a few goroutines at once.
	var mu sync.Mutex
	var runs []run
	lightStarted := make(map[string]int)
	handler := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		start := time.Now()
		time.Sleep(cfg.Task)
		queued := time.Unix(0, int64(binary.BigEndian.Uint64(t.Payload())))
		tenant := aqworker.Tenant(ctx)
		mu.Lock()
		runs = append(runs, run{Run: worktime.Run{Tenant: tenant, Start: start, End: time.Now()}, queued: queued})
		if tenant != "noisy" {
			lightStarted[tenant]++
		}
		mu.Unlock()
		return nil
	})
	wcfg := aqworker.Config{
		Concurrency:       cfg.Concurrency,
		Queues:            map[string]int{queue: 1},
		TaskCheckInterval: 10 * time.Millisecond, // the same for every row
		ShutdownTimeout:   time.Second,
		Logger:            slog.New(slog.DiscardHandler),
	}
	if c.capped {
		wcfg.Gate, wcfg.Fair = gate, c.fair
	}
	w := aqworker.New(asynq.RedisClientOpt{Addr: opts.Addr, Username: opts.Username, Password: opts.Password, DB: opts.DB, TLSConfig: opts.TLSConfig}, wcfg)
	if err := w.Start(handler); err != nil {
		return NeighbourRow{}, err
	}
	defer w.Shutdown()
	if c.capped {
		// Producers see a queue's workers within a second.
		time.Sleep(1100 * time.Millisecond)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	const batch = 250
	chunks := make(chan int)
	for range 8 {
		wg.Go(func() {
			for from := range chunks {
				ts := make([]*asynq.Task, 0, batch)
				for range min(batch, cfg.Backlog-from) {
					ts = append(ts, asynq.NewTask("noisy", stamp()))
				}
				if err := send(ctx, "noisy", ts); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	// Batches go in order when the pool is one goroutine per batch in
	// turn; order among the noisy tenant's own tasks does not matter here.
	for from := 0; from < cfg.Backlog; from += batch {
		chunks <- from
	}
	close(chunks)
	wg.Wait()
	select {
	case err := <-errs:
		return NeighbourRow{}, fmt.Errorf("enqueueing the backlog: %w", err)
	default:
	}

	// The light tenants, each a task every Every, staggered.
	begin := time.Now()
	sctx, stop := context.WithDeadline(ctx, begin.Add(cfg.Duration))
	defer stop()
	sent := make([]int, cfg.Light)
	for i := range cfg.Light {
		wg.Go(func() {
			tenant := "light" + strconv.Itoa(i)
			next := begin.Add(cfg.Every * time.Duration(i) / time.Duration(cfg.Light))
			for {
				select {
				case <-sctx.Done():
					return
				case <-time.After(time.Until(next)):
				}
				if err := send(ctx, tenant, []*asynq.Task{asynq.NewTask("light", stamp())}); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
				sent[i]++
				next = next.Add(cfg.Every)
			}
		})
	}
	wg.Wait()
	end := time.Now()
	select {
	case err := <-errs:
		return NeighbourRow{}, fmt.Errorf("enqueueing a light task: %w", err)
	default:
	}
	// Every light task must start: behind a bare queue's backlog, that is
	// once the backlog ahead of it has run.
	total := 0
	for _, n := range sent {
		total += n
	}
	deadline := time.Now().Add(cfg.Duration + time.Duration(cfg.Backlog)*cfg.Task/time.Duration(cfg.Concurrency)*2 + 30*time.Second)
	for {
		mu.Lock()
		started := 0
		for _, n := range lightStarted {
			started += n
		}
		mu.Unlock()
		if started >= total {
			break
		}
		if time.Now().After(deadline) {
			return NeighbourRow{}, fmt.Errorf("%d of %d light tasks started", started, total)
		}
		select {
		case <-ctx.Done():
			return NeighbourRow{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	w.Shutdown()
	mu.Lock()
	defer mu.Unlock()
	return neighbourRow(c.name, cfg, runs, begin, end), nil
}

// neighbourRow computes a row from the runs: the light tenants' waits,
// and over [begin, end), while every tenant had work, the worker time each
// tenant got.
func neighbourRow(name string, cfg NeighbourConfig, runs []run, begin, end time.Time) NeighbourRow {
	row := NeighbourRow{Name: name}
	var waits []time.Duration
	got := worktime.Used(workRuns(runs), begin, end)
	noisy := 0
	for _, r := range runs {
		if r.Tenant != "noisy" {
			waits = append(waits, r.Start.Sub(r.queued))
		} else if !r.Start.Before(begin) && r.Start.Before(end) && r.End.After(r.Start) {
			noisy++
		}
	}
	slices.Sort(waits)
	row.LightTasks = len(waits)
	if n := len(waits); n > 0 {
		row.LightP50, row.LightP99, row.LightMax = waits[n/2], waits[min(n-1, n*99/100)], waits[n-1]
	}
	span := end.Sub(begin)
	row.NoisyPerSecond = float64(noisy) / span.Seconds()
	var used time.Duration
	for _, d := range got {
		used += d
	}
	row.Busy = float64(used) / (float64(span) * float64(cfg.Concurrency))

	// Max-min fair shares: each light tenant needs Task per Every; the
	// noisy tenant, backlogged, deserves the rest of the pool.
	pool := float64(span) * float64(cfg.Concurrency)
	lightNeed := float64(span) * float64(cfg.Task) / float64(cfg.Every)
	lightFair := min(lightNeed, pool/float64(cfg.Light+1))
	noisyFair := pool - lightFair*float64(cfg.Light)
	var sum, sumSq float64
	add := func(x float64) { sum += x; sumSq += x * x }
	add(float64(got["noisy"]) / noisyFair)
	for i := range cfg.Light {
		add(float64(got["light"+strconv.Itoa(i)]) / lightFair)
	}
	n := float64(cfg.Light + 1)
	if sumSq > 0 {
		row.Jain = sum * sum / (n * sumSq)
	}
	return row
}

// WriteText writes the report as a table.
func (r NeighbourReport) WriteText(w io.Writer) error {
	c := r.Config
	fmt.Fprintf(w, "noisy neighbour: 1 tenant with %d tasks queued, %d light tenants sending one every %v for %v; tasks of %v, %d workers\n",
		c.Backlog, c.Light, c.Every, c.Duration, c.Task, c.Concurrency)
	fmt.Fprintf(w, "light wait: enqueue to start. Jain: fairness of worker time over max-min fair shares while all sent (1 = fair).\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTENDER\tLIGHT P50\tLIGHT P99\tLIGHT MAX\tLIGHT TASKS\tJAIN\tNOISY/S\tPOOL BUSY")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%.3f\t%.0f\t%.0f%%\n", row.Name, fmtDur(row.LightP50), fmtDur(row.LightP99), fmtDur(row.LightMax),
			row.LightTasks, row.Jain, row.NoisyPerSecond, 100*row.Busy)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Alone.Bare > 0 {
		fmt.Fprintf(w, "\na tenant alone, %d tasks on a fair pool: %.0f tasks/s against bare asynq's %.0f (%.2f×)\n",
			r.Alone.Tasks, r.Alone.Fair, r.Alone.Bare, r.Alone.Fair/r.Alone.Bare)
	}
	if r.Weights.Ratio > 0 {
		fmt.Fprintf(w, "weights 3:1, two tenants with %d tasks each on a fair pool: %.2f× the worker time\n", r.Weights.Tasks, r.Weights.Ratio)
	}
	return nil
}
