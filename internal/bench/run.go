package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
)

// Config says what Run measures. Its zero value runs every contender for 5s
// at 64 callers over 1000 uniformly chosen tenants, with a quota of 100 per
// second, on a throwaway redis-server.
type Config struct {
	// Redis is the server to measure on. Nil starts a throwaway
	// redis-server on a free loopback port (it must be on PATH, else Run
	// returns ErrNoRedisServer) and removes it afterwards. On a server of
	// the caller's, Run touches only its own keys (see Prefix) and reads
	// counters as differences, so other traffic on it skews the figures.
	Redis *redis.Options
	// Concurrency is the number of callers; 0 means 64. Each contender gets
	// a client with a pool of Concurrency+4 connections.
	Concurrency int
	// Tenants is how many tenants the callers spread over; 0 means 1000.
	Tenants int
	// Zipf, when above 1, picks tenants from a Zipf distribution with this
	// exponent (a few hot tenants, a long tail); 0 picks them uniformly.
	Zipf float64
	// Quota is every tenant's quota, and every contender enforces the same
	// Limit per Window. The zero value means 100 per 1s with no MaxDelay,
	// so the gate admits or rejects; a MaxDelay makes it defer too, where
	// the others can only reject.
	Quota admission.Quota
	// Duration is how long each contender is measured; 0 means 5s.
	Duration time.Duration
	// Warmup is how long each contender runs unmeasured first, to dial
	// connections, load scripts and fill the windows; 0 means 1s, and a
	// negative value means none.
	Warmup time.Duration
	// FloodFactor is the offered load of the flood row, as a multiple of
	// Limit per Window, paced over the callers; 0 means 20.
	FloodFactor int
	// Only lists the contenders to run (see Contenders); nil runs all.
	Only []string
	// Progress, when set, is called about five times a second while Run
	// runs, from the goroutine that called Run.
	Progress func(Progress)
}

// Progress is where a run is, for a progress line.
type Progress struct {
	// Index counts the rows done; Total is how many there are.
	Index, Total int
	// ID and Name name the contender running.
	ID, Name string
	// Warmup is set while the contender runs unmeasured.
	Warmup bool
	// Elapsed is how far into the phase (warmup or measurement) it is, out
	// of Duration.
	Elapsed, Duration time.Duration
	// Decisions is how many decisions it has measured so far.
	Decisions int64
}

func (c Config) withDefaults() (Config, error) {
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if c.Tenants == 0 {
		c.Tenants = 1000
	}
	if c.Quota == (admission.Quota{}) {
		c.Quota = admission.Quota{Limit: 100, Window: time.Second}
	}
	if c.Duration == 0 {
		c.Duration = 5 * time.Second
	}
	switch {
	case c.Warmup == 0:
		c.Warmup = time.Second
	case c.Warmup < 0:
		c.Warmup = 0
	}
	if c.FloodFactor == 0 {
		c.FloodFactor = 20
	}
	switch {
	case c.Concurrency < 1:
		return c, fmt.Errorf("bench: Concurrency is %d, want at least 1", c.Concurrency)
	case c.Tenants < 1:
		return c, fmt.Errorf("bench: Tenants is %d, want at least 1", c.Tenants)
	case c.Zipf != 0 && c.Zipf <= 1:
		return c, fmt.Errorf("bench: Zipf is %v, want 0 (uniform) or above 1", c.Zipf)
	case c.Duration < 0:
		return c, fmt.Errorf("bench: Duration is %v, want more than 0", c.Duration)
	case c.FloodFactor < 1:
		return c, fmt.Errorf("bench: FloodFactor is %d, want at least 1", c.FloodFactor)
	case c.Quota.Window%time.Millisecond != 0:
		return c, fmt.Errorf("bench: Window is %v, want whole milliseconds (the baselines count in ms)", c.Quota.Window)
	}
	if err := c.Quota.Validate(); err != nil {
		return c, fmt.Errorf("bench: %w", err)
	}
	known := Contenders()
	for _, id := range c.Only {
		if !slices.Contains(known, id) {
			return c, fmt.Errorf("bench: unknown contender %q, want one of %s", id, strings.Join(known, ", "))
		}
	}
	return c, nil
}

// Run measures every contender in turn, each for Duration after Warmup, on
// the same Redis, and reports them side by side. It returns early, with the
// rows done so far, when ctx is done or a contender cannot be set up; a
// contender whose calls fail still gets its row, with Errors counted.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	opts := cfg.Redis
	embedded := opts == nil
	if embedded {
		addr, stop, err := startRedis(ctx)
		if err != nil {
			return Report{}, err
		}
		defer stop()
		opts = &redis.Options{Addr: addr}
	}
	admin := redis.NewClient(withPool(opts, 2))
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		return Report{}, fmt.Errorf("bench: redis at %s: %w", opts.Addr, err)
	}

	rep := newReport(cfg, opts.Addr, redisVersion(ctx, admin), embedded)
	if err := unlinkMatching(ctx, admin, ownedPatterns...); err != nil {
		return rep, fmt.Errorf("bench: remove keys left by an earlier run: %w", err)
	}
	defer cleanup(ctx, admin)

	var run []contender
	for _, c := range contenders() {
		if cfg.Only == nil || slices.Contains(cfg.Only, c.id) {
			run = append(run, c)
		}
	}
	tenants := make([]string, cfg.Tenants)
	for i := range tenants {
		tenants[i] = "t" + strconv.Itoa(i)
	}
	for i, c := range run {
		r := &runner{cfg: cfg, opts: opts, admin: admin, tenants: tenants, c: c, index: i, total: len(run)}
		row, err := r.run(ctx)
		if err != nil {
			rep.finish()
			return rep, fmt.Errorf("bench: %s: %w", c.name, err)
		}
		rep.Rows = append(rep.Rows, row)
		if err := cleanup(ctx, admin); err != nil {
			rep.finish()
			return rep, fmt.Errorf("bench: remove the keys of %s: %w", c.name, err)
		}
	}
	rep.finish()
	return rep, nil
}

// cleanup removes every key the bench wrote, even when ctx is done.
func cleanup(ctx context.Context, admin *redis.Client) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := unlinkMatching(ctx, admin, ownedPatterns...); err != nil {
		return err
	}
	// asynq lists every queue it has seen in this set.
	return admin.SRem(ctx, "asynq:queues", queue).Err()
}

func withPool(o *redis.Options, size int) *redis.Options {
	c := *o
	c.PoolSize = size
	return &c
}

// runner measures one contender.
type runner struct {
	cfg          Config
	opts         *redis.Options
	admin        *redis.Client
	tenants      []string
	c            contender
	index, total int
}

const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// worker is one caller. It owns its counters and histogram, so recording
// takes no lock; the runner reads them once the worker has returned.
type worker struct {
	hist                                histogram
	decisions, errs                     int64
	admitted, deferred, rejected, local int64
	firstErr                            error
	progress                            atomic.Int64 // measured decisions, for the progress line
}

func (w *worker) record(res Result, err error, lat time.Duration) {
	if err != nil {
		w.errs++
		if w.firstErr == nil {
			w.firstErr = err
		}
		return
	}
	w.decisions++
	w.hist.record(lat)
	switch res.Outcome {
	case admission.Admitted:
		w.admitted++
	case admission.Deferred:
		w.deferred++
	case admission.Rejected:
		w.rejected++
	}
	if res.Local {
		w.local++
	}
	w.progress.Add(1)
}

func (r *runner) run(ctx context.Context) (Row, error) {
	cfg := r.cfg
	rdb := redis.NewClient(withPool(r.opts, cfg.Concurrency+4))
	defer rdb.Close()
	prefix := Prefix + ":" + r.c.id
	lim := r.c.build(env{rdb: rdb, prefix: prefix, quota: cfg.Quota})

	var phase atomic.Int32
	workers := make([]*worker, cfg.Concurrency)
	var wg sync.WaitGroup
	floodEvery := time.Duration(float64(cfg.Quota.Window) * float64(cfg.Concurrency) / float64(cfg.FloodFactor*cfg.Quota.Limit))
	start := time.Now()
	for i := range workers {
		w := new(worker)
		workers[i] = w
		wg.Add(1)
		if r.c.flood {
			first := start.Add(floodEvery * time.Duration(i) / time.Duration(cfg.Concurrency))
			go func() { defer wg.Done(); w.paced(ctx, lim, &phase, first, floodEvery) }()
		} else {
			pick := r.picker(uint64(i))
			go func() { defer wg.Done(); w.closedLoop(ctx, lim, &phase, r.tenants, pick) }()
		}
	}
	stopWorkers := func() { phase.Store(phaseStop); wg.Wait() }

	r.wait(ctx, true, cfg.Warmup, nil)
	before, err := readStats(ctx, r.admin)
	if err != nil {
		stopWorkers()
		return Row{}, fmt.Errorf("INFO: %w", err)
	}
	phase.Store(phaseMeasure)
	t0 := time.Now()
	r.wait(ctx, false, cfg.Duration, workers)
	phase.Store(phaseStop)
	elapsed := time.Since(t0)
	after, err := readStats(ctx, r.admin)
	wg.Wait()
	if err != nil {
		return Row{}, fmt.Errorf("INFO: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Row{}, err
	}

	row := Row{ID: r.c.id, Name: r.c.name, Workload: r.workload(), Seconds: elapsed.Seconds()}
	var h histogram
	for _, w := range workers {
		h.merge(&w.hist)
		row.Decisions += w.decisions
		row.Errors += w.errs
		row.Admitted += w.admitted
		row.Deferred += w.deferred
		row.Rejected += w.rejected
		row.Local += w.local
		if row.FirstError == "" && w.firstErr != nil {
			row.FirstError = w.firstErr.Error()
		}
	}
	row.PerSecond = float64(row.Decisions) / elapsed.Seconds()
	row.P50, row.P99, row.P999, row.Max = h.quantile(0.50), h.quantile(0.99), h.quantile(0.999), h.max

	calls, usec := scriptDelta(before, after)
	if row.Decisions > 0 {
		row.ScriptCallsPerDecision = float64(calls) / float64(row.Decisions)
		row.RedisCPUPerDecision = (after.cpu - before.cpu) * 1e6 / float64(row.Decisions)
	}
	if calls > 0 {
		row.ScriptUsecPerCall = float64(usec) / float64(calls)
	}
	if r.c.logKey != nil {
		if row.BytesPerEntry, row.LogKeysSampled, err = bytesPerEntry(ctx, r.admin, r.sampleKeys(prefix)); err != nil {
			return Row{}, fmt.Errorf("MEMORY USAGE: %w", err)
		}
	}
	return row, nil
}

// logSamples is how many tenants' logs bytes per entry is measured over.
const logSamples = 16

// sampleKeys names the logs to measure: the flood tenant's, or those of
// tenants spread evenly over the range (under Zipf, the hottest first).
func (r *runner) sampleKeys(prefix string) []string {
	if r.c.flood {
		return []string{r.c.logKey(prefix, floodTenant)}
	}
	n := min(logSamples, len(r.tenants))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = r.c.logKey(prefix, r.tenants[i*len(r.tenants)/n])
	}
	return keys
}

func (r *runner) workload() string {
	if r.c.flood {
		return fmt.Sprintf("1 tenant at %d× quota, paced", r.cfg.FloodFactor)
	}
	dist := "uniform"
	if r.cfg.Zipf > 1 {
		dist = fmt.Sprintf("zipf s=%g", r.cfg.Zipf)
	}
	return fmt.Sprintf("%d tenants, %s", r.cfg.Tenants, dist)
}

// picker returns the tenant chooser of worker i: its own generator, so the
// callers draw without sharing state.
func (r *runner) picker(i uint64) func() int {
	rng := rand.New(rand.NewPCG(0x5eed, i))
	n := len(r.tenants)
	if r.cfg.Zipf > 1 && n > 1 {
		z := rand.NewZipf(rng, r.cfg.Zipf, 1, uint64(n-1))
		return func() int { return int(z.Uint64()) }
	}
	return func() int { return rng.IntN(n) }
}

// wait lets the workers run for d, reporting progress, or until ctx is done.
func (r *runner) wait(ctx context.Context, warmup bool, d time.Duration, workers []*worker) {
	start := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	for {
		if r.cfg.Progress != nil {
			p := Progress{Index: r.index, Total: r.total, ID: r.c.id, Name: r.c.name, Warmup: warmup,
				Elapsed: min(time.Since(start), d), Duration: d}
			for _, w := range workers {
				p.Decisions += w.progress.Load()
			}
			r.cfg.Progress(p)
		}
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case <-tick.C:
		}
	}
}

// closedLoop calls lim back to back, each time for a tenant from pick,
// until the phase is phaseStop.
func (w *worker) closedLoop(ctx context.Context, lim Limiter, phase *atomic.Int32, tenants []string, pick func() int) {
	for phase.Load() != phaseStop && ctx.Err() == nil {
		tenant := tenants[pick()]
		t0 := time.Now()
		res, err := lim.Allow(ctx, tenant)
		lat := time.Since(t0)
		if phase.Load() == phaseMeasure {
			w.record(res, err, lat)
		}
	}
}

// paced calls lim for the flood tenant once every interval from first on,
// whatever the answers take: an open loop, so the offered load stays the
// same however fast the limiter answers. A caller that falls behind catches
// up at once.
func (w *worker) paced(ctx context.Context, lim Limiter, phase *atomic.Int32, first time.Time, every time.Duration) {
	next := first
	for phase.Load() != phaseStop && ctx.Err() == nil {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		next = next.Add(every)
		t0 := time.Now()
		res, err := lim.Allow(ctx, floodTenant)
		lat := time.Since(t0)
		if phase.Load() == phaseMeasure {
			w.record(res, err, lat)
		}
	}
}

// hostInfo describes the machine the bench ran on.
func hostInfo() Host {
	return Host{GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH}
}
