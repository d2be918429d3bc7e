package bench

import (
	"context"
	"fmt"
	"io"
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
	// Cluster, when set, measures on this Redis Cluster instead of Redis,
	// with the same care for other people's keys, and reports each
	// master's CPU and how the tenants spread over the masters.
	Cluster *redis.ClusterOptions
	// StartCluster, when Redis and Cluster are nil, starts a throwaway
	// Redis Cluster of 3 masters on loopback ports (as internal/redistest
	// does) and removes it afterwards.
	StartCluster bool
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
	// Duration is how long each contender is measured in all; 0 means 5s.
	Duration time.Duration
	// Rounds splits each contender's Duration into this many slices, run
	// round-robin (A B C … A B C …), so that a burst of load from elsewhere
	// on the machine falls on every contender alike rather than on one; 0
	// means 3.
	Rounds int
	// Warmup is how long each slice runs unmeasured first, to load scripts
	// and fill the windows (every slice starts on empty keys); 0 means
	// 500ms, and a negative value means none.
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
	// Index counts the contenders done in this round; Total is how many
	// there are.
	Index, Total int
	// Round counts the rounds done; Rounds is how many there are.
	Round, Rounds int
	// ID and Name name the contender running.
	ID, Name string
	// Warmup is set while the contender runs unmeasured.
	Warmup bool
	// Elapsed is how far into the phase (warmup or measurement) of this
	// slice it is, out of Duration.
	Elapsed, Duration time.Duration
	// Decisions is how many decisions it has measured so far in this
	// slice.
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
	if c.Rounds == 0 {
		c.Rounds = 3
	}
	switch {
	case c.Warmup == 0:
		c.Warmup = 500 * time.Millisecond
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
	case c.Rounds < 1:
		return c, fmt.Errorf("bench: Rounds is %d, want at least 1", c.Rounds)
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

// Run measures every contender on the same Redis, round-robin in Rounds
// slices of Duration/Rounds each after Warmup, and reports them side by
// side. It returns early when ctx is done or Redis fails outside a
// contender's calls, with the rows measured so far; a contender whose calls
// fail still gets its row, with Errors counted.
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Report{}, err
	}
	tg, err := connect(ctx, cfg)
	if err != nil {
		return Report{}, err
	}
	defer tg.close()
	admin := tg.admin

	rep := newReport(cfg, tg.addr, redisVersion(ctx, admin), tg.embedded)
	if err := unlinkMatching(ctx, admin, ownedPatterns...); err != nil {
		return rep, fmt.Errorf("bench: remove keys left by an earlier run: %w", err)
	}
	defer cleanup(ctx, admin)

	tenants := make([]string, cfg.Tenants)
	for i := range tenants {
		tenants[i] = "t" + strconv.Itoa(i)
	}
	share := map[string]float64{}
	if cc, ok := admin.(*redis.ClusterClient); ok {
		rep.Redis.Cluster = true
		if rep.Spread, err = tenantSpread(ctx, cc, tenants); err != nil {
			return rep, fmt.Errorf("bench: tenant spread: %w", err)
		}
		for _, m := range rep.Spread {
			share[m.Addr] = float64(m.Tenants) / float64(len(tenants))
		}
	}
	// The equal-outcome run first: a quota no caller can reach, so every
	// contender admits every call and the figures compare like with like.
	// Then the configured quota, where the gate defers and rejects (some
	// of it locally) and the others reject: its own section.
	// No deferral there, so no MaxDelay: a log's bound (Limit × (1 +
	// MaxDelay/Window) entries) holds at EqualLimit whatever --max-delay says.
	equal := cfg
	equal.Quota.Limit, equal.Quota.MaxDelay = max(cfg.Quota.Limit, EqualLimit), 0
	at := newReport(cfg, tg.addr, rep.Redis.Version, tg.embedded)
	at.Redis.Cluster = rep.Redis.Cluster
	rep.Quota.Limit, rep.Quota.MaxDelay = equal.Quota.Limit, 0
	rep.Outcomes, at.Outcomes = OutcomesEqual, OutcomesAtQuota
	rep.AtQuota = &at
	rep.Rows, err = measure(ctx, equal, tg, tenants, share, false)
	if err == nil {
		at.Rows, err = measure(ctx, cfg, tg, tenants, share, true)
	}
	rep.finish()
	return rep, err
}

// EqualLimit is the per-window limit of the equal-outcome run (unless the
// configured one is larger): more than any tenant can be asked for in a
// window, so that every contender admits every call.
const EqualLimit = 100_000

// Outcomes label a report's section.
const (
	OutcomesEqual   = "equal outcomes: a quota no tenant reaches, every contender admits every call"
	OutcomesAtQuota = "at quota: the gate defers and rejects (some locally), the others reject; outcomes differ"
)

// measure runs the contenders cfg selects (the flood only with flood) in
// rounds, and returns their rows, with what it measured so far on an
// error.
func measure(ctx context.Context, cfg Config, tg *target, tenants []string, share map[string]float64, flood bool) ([]Row, error) {
	var runners []*runner
	for _, c := range contenders() {
		if (cfg.Only == nil || slices.Contains(cfg.Only, c.id)) && (flood || !c.flood) {
			runners = append(runners, newRunner(cfg, tg, tenants, share, c))
		}
	}
	defer func() {
		for _, r := range runners {
			r.rdb.Close()
		}
	}()
	err := func() error {
		for round := range cfg.Rounds {
			for i, r := range runners {
				if err := r.slice(ctx, round, i, len(runners)); err != nil {
					return fmt.Errorf("bench: %s: %w", r.c.name, err)
				}
				// Every slice starts on empty keys, and asynq's tasks
				// must not pile up over the run.
				if err := cleanup(ctx, tg.admin); err != nil {
					return fmt.Errorf("bench: remove the keys of %s: %w", r.c.name, err)
				}
			}
		}
		return nil
	}()
	rows := []Row{}
	for _, r := range runners {
		if r.slices > 0 {
			rows = append(rows, r.row())
		}
	}
	return rows, err
}

// cleanup removes every key the bench wrote, even when ctx is done.
func cleanup(ctx context.Context, admin redis.UniversalClient) error {
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

// runner measures one contender, slice by slice, and adds the slices up.
type runner struct {
	cfg     Config
	admin   redis.UniversalClient
	tenants []string
	share   map[string]float64 // each master's share of the tenants; empty off a cluster
	c       contender
	prefix  string
	rdb     redis.UniversalClient // the contender's own
	env     env                   // what each slice builds the contender from

	// Sums over the slices so far.
	slices               int
	elapsed              time.Duration
	hist                 histogram
	total                worker
	firstErr             error
	scriptCalls, usec    int64
	zaddUsec             int64 // Redis's time in ZADD, in scripts or not
	cpu                  float64
	clientCPU            time.Duration
	logBytes, logEntries int64
	logKeys              int
	masters              map[string]*MasterCPU // by address, on a cluster
}

func newRunner(cfg Config, tg *target, tenants []string, share map[string]float64, c contender) *runner {
	rdb := tg.client(cfg.Concurrency + 4)
	prefix := Prefix + ":" + c.id
	return &runner{
		cfg: cfg, admin: tg.admin, tenants: tenants, share: share, c: c, prefix: prefix, rdb: rdb,
		env:     env{rdb: rdb, prefix: prefix, quota: cfg.Quota, timeout: tg.timeout},
		masters: make(map[string]*MasterCPU),
	}
}

// callTimeout is the deadline the gate gets for one Redis call: the same
// as the other contenders' go-redis read timeout, so that a machine too
// loaded to answer in the gate's short default does not fail only the gate.
func callTimeout(o *redis.Options) time.Duration {
	if o.ReadTimeout > 0 {
		return o.ReadTimeout
	}
	return 3 * time.Second // go-redis's default
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

// slice runs the contender for one warmup and one measured slice, and adds
// what it measured to the sums.
func (r *runner) slice(ctx context.Context, round, index, total int) error {
	cfg := r.cfg
	d := cfg.Duration / time.Duration(cfg.Rounds)
	if r.c.flood {
		// A flood admits Limit at the start of each window and then only
		// rejects, so a slice measures whole windows, or its admissions
		// (and script calls) per decision would depend on where it cut.
		w := cfg.Quota.Window
		d = max(w, (d+w/2)/w*w)
	}
	p := Progress{Index: index, Total: total, Round: round, Rounds: cfg.Rounds, ID: r.c.id, Name: r.c.name}

	// Every slice starts afresh: on empty keys, and with a contender built
	// anew, so that no state it keeps in process (the gate's cached
	// rejections, say) outlives the keys it was about.
	lim := r.c.build(r.env)
	if c, ok := lim.(io.Closer); ok {
		defer c.Close()
	}
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
			pick := r.picker(uint64(round), uint64(i))
			go func() { defer wg.Done(); w.closedLoop(ctx, lim, &phase, r.tenants, pick) }()
		}
	}

	p.Warmup = true
	r.wait(ctx, p, cfg.Warmup, nil)
	before, err := readAll(ctx, r.admin)
	if err != nil {
		phase.Store(phaseStop)
		wg.Wait()
		return fmt.Errorf("INFO: %w", err)
	}
	cpu0 := processCPU()
	phase.Store(phaseMeasure)
	t0 := time.Now()
	p.Warmup = false
	r.wait(ctx, p, d, workers)
	phase.Store(phaseStop)
	elapsed := time.Since(t0)
	r.clientCPU += processCPU() - cpu0
	after, err := readAll(ctx, r.admin)
	wg.Wait()
	if err != nil {
		return fmt.Errorf("INFO: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	r.slices++
	r.elapsed += elapsed
	for _, w := range workers {
		r.hist.merge(&w.hist)
		t := &r.total
		t.decisions += w.decisions
		t.errs += w.errs
		t.admitted += w.admitted
		t.deferred += w.deferred
		t.rejected += w.rejected
		t.local += w.local
		if r.firstErr == nil {
			r.firstErr = w.firstErr
		}
	}
	calls, usec := scriptDelta(sumStats(before), sumStats(after))
	r.scriptCalls += calls
	r.usec += usec
	r.zaddUsec += sumStats(after).cmds["zadd"].usec - sumStats(before).cmds["zadd"].usec
	r.cpu += sumStats(after).cpu - sumStats(before).cpu
	if len(r.share) > 0 {
		for addr, a := range after {
			b, ok := before[addr]
			if !ok {
				return fmt.Errorf("INFO: master %s appeared during the run", addr)
			}
			m := r.masters[addr]
			if m == nil {
				m = &MasterCPU{Addr: addr}
				r.masters[addr] = m
			}
			c, _ := scriptDelta(b, a)
			m.ScriptCalls += c
			m.CPUSeconds += a.cpu - b.cpu
		}
	}
	if r.c.logKey != nil {
		bytes, entries, keys, err := logMemory(ctx, r.admin, r.sampleKeys())
		if err != nil {
			return fmt.Errorf("MEMORY USAGE: %w", err)
		}
		r.logBytes += bytes
		r.logEntries += entries
		r.logKeys += keys
	}
	return nil
}

// row is the sums as a Row.
func (r *runner) row() Row {
	t := &r.total
	row := Row{
		ID: r.c.id, Name: r.c.name, Workload: r.workload(), Seconds: r.elapsed.Seconds(),
		Decisions: t.decisions, Errors: t.errs,
		Admitted: t.admitted, Deferred: t.deferred, Rejected: t.rejected, Local: t.local,
		P50: r.hist.quantile(0.50), P99: r.hist.quantile(0.99), P999: r.hist.quantile(0.999), Max: r.hist.max,
	}
	if r.firstErr != nil {
		row.FirstError = r.firstErr.Error()
	}
	if r.elapsed > 0 {
		row.PerSecond = float64(t.decisions) / r.elapsed.Seconds()
	}
	if t.decisions > 0 {
		row.ScriptCallsPerDecision = float64(r.scriptCalls) / float64(t.decisions)
		row.RedisCPUPerDecision = r.cpu * 1e6 / float64(t.decisions)
		row.ClientCPUPerDecision = float64(r.clientCPU.Microseconds()) / float64(t.decisions)
	}
	if r.scriptCalls > 0 {
		row.ScriptUsecPerCall = float64(r.usec) / float64(r.scriptCalls)
	}
	if recorded := t.admitted + t.deferred; recorded > 0 {
		row.ScriptUsecPerRecorded = float64(r.usec) / float64(recorded)
		row.ZaddUsecPerRecorded = float64(r.zaddUsec) / float64(recorded)
	}
	row.Masters = r.masterRows()
	if r.logEntries > 0 {
		// Summed, not averaged: a log with more entries weighs more.
		row.BytesPerEntry = float64(r.logBytes) / float64(r.logEntries)
		row.LogKeysSampled = r.logKeys
	}
	return row
}

// logSamples is how many tenants' logs bytes per entry is measured over.
const logSamples = 16

// sampleKeys names the logs to measure: the flood tenant's, or those of
// tenants spread evenly over the range (under Zipf, the hottest first).
func (r *runner) sampleKeys() []string {
	if r.c.flood {
		return []string{r.c.logKey(r.prefix, floodTenant)}
	}
	n := min(logSamples, len(r.tenants))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = r.c.logKey(r.prefix, r.tenants[i*len(r.tenants)/n])
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

// picker returns the tenant chooser of worker i in a round: its own
// generator, so the callers draw without sharing state.
func (r *runner) picker(round, i uint64) func() int {
	rng := rand.New(rand.NewPCG(round, i))
	n := len(r.tenants)
	if r.cfg.Zipf > 1 && n > 1 {
		z := rand.NewZipf(rng, r.cfg.Zipf, 1, uint64(n-1))
		return func() int { return int(z.Uint64()) }
	}
	return func() int { return rng.IntN(n) }
}

// wait lets the workers run for d, reporting progress, or until ctx is done.
func (r *runner) wait(ctx context.Context, p Progress, d time.Duration, workers []*worker) {
	start := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	end := time.NewTimer(d)
	defer end.Stop()
	p.Duration = d
	for {
		if r.cfg.Progress != nil {
			p.Elapsed = min(time.Since(start), d)
			p.Decisions = 0
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
