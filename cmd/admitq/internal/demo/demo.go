package demo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/metrics"
	"github.com/admitq/admitq/worker"
)

// Tenant is one producer of the scenario.
type Tenant struct {
	Name  string
	Quota admission.Quota
	Rate  float64 // tasks sent per second
}

// DefaultTenants is the scenario of admitq demo: "noisy" sends four times
// its quota; "steady" and "small" stay within theirs.
func DefaultTenants() []Tenant {
	return []Tenant{
		{Name: "noisy", Quota: admission.Quota{Limit: 10, Window: time.Second, MaxDelay: 3 * time.Second}, Rate: 40},
		{Name: "steady", Quota: admission.Quota{Limit: 20, Window: time.Second, MaxDelay: 3 * time.Second}, Rate: 12},
		{Name: "small", Quota: admission.Quota{Limit: 5, Window: time.Second, MaxDelay: 3 * time.Second}, Rate: 3},
	}
}

// Config sets up a run.
type Config struct {
	// Redis carries the gate, the quotas, the producers' asynq client and
	// the final inspection. The caller owns it.
	Redis redis.UniversalClient
	// Worker makes the worker's own Redis connections.
	Worker asynq.RedisConnOpt
	// Prefix is the admission key prefix. Every run should use its own
	// (see NewRunID), so that one run's reservations do not meet the next.
	Prefix string
	// Queue is the asynq queue; every run should use its own, for the same
	// reason.
	Queue string
	// Tenants are the producers. Nil means DefaultTenants.
	Tenants []Tenant
	// Duration is how long the producers send. Zero means 20 s.
	Duration time.Duration
	// Drain is how long, after sending stops, the run waits for deferred
	// tasks to come due and run. Zero means the longest MaxDelay plus 3 s:
	// the gate compares MaxDelay in whole seconds for asynq, so a slot may
	// lie up to a second past it.
	Drain time.Duration
	// Work is how long each task pretends to work. Zero means 20 ms.
	Work time.Duration
	// Concurrency of the worker. Zero means 20.
	Concurrency int
	// Timeout bounds each Redis call of the gate. Zero means
	// admission.DefaultTimeout.
	Timeout time.Duration
	// Metrics, if not nil, observes decisions and task runs.
	Metrics *metrics.Metrics
	// Logger receives the worker's logs. Nil means none.
	Logger *slog.Logger
	// OnSecond, if not nil, is called once a second with what happened in
	// that second, from a single goroutine.
	OnSecond func(Second)
}

// Second is what happened in one second of a run.
type Second struct {
	N        int  // 1 for the first second
	Draining bool // producers have stopped; deferred tasks are still coming due
	Tenants  []SecondTenant
}

// SecondTenant is one tenant's part of a Second.
type SecondTenant struct {
	Tenant                       string
	Admitted, Deferred, Rejected int // decisions in the second
	Errors                       int // enqueues that failed otherwise
	Processed                    int // tasks that finished in the second
	InWindow, Limit, Ahead       int // the tenant's log at the end of the second
	UsageErr                     error
}

// Result is the outcome of a run.
type Result struct {
	Start   time.Time // whole second the producers started at
	Sending time.Duration
	Elapsed time.Duration
	Tenants []TenantResult

	// Bound holds when no tenant's recorded slots exceed its limit in any
	// window and no task started before its slot.
	Bound bool
	// NothingLost holds when every task sent was processed, is still in
	// asynq, or was refused back to its producer.
	NothingLost bool
	// Interrupted is set when ctx ended the run early.
	Interrupted bool
}

// TenantResult is one tenant's totals.
type TenantResult struct {
	Tenant
	Sent, Admitted, Deferred, Rejected, Errors int
	Processed                                  int // distinct tasks that ran to the end
	Waiting                                    int // enqueued tasks still in asynq (pending, scheduled, active, retry)
	Lost                                       int // enqueued tasks neither processed nor in asynq
	Duplicates                                 int // extra runs of a task already processed

	Slots        int // slots recorded (admitted + deferred)
	MaxInWindow  int // most recorded slots in any window of the quota's length
	StartedEarly int // tasks that started before their slot

	// Started and SentPerSecond count, for each second since Result.Start,
	// the tasks that started and the tasks sent.
	Started, SentPerSecond []int
	// BusiestSecond is the most tasks started in one whole second.
	BusiestSecond int
	// DelayP50, DelayP99 and DelayMax are the queueing delays, from slot to
	// start.
	DelayP50, DelayP99, DelayMax time.Duration
}

// NewRunID returns a short random name for a run's prefix and queue.
func NewRunID() string {
	const alphabet = "abcdefghijkmnpqrstuvwxyz23456789"
	var b [6]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:])
}

// sendRec is one task a producer sent.
type sendRec struct {
	tenant int
	id     string
	at     time.Time // local time of the send
	d      admission.Decision
	err    error
}

// startRec is one run of a task.
type startRec struct {
	tenant string
	start  time.Time
	done   bool
}

// counts is one tenant's tally for the second in progress.
type counts struct{ admitted, deferred, rejected, errors, processed int }

type run struct {
	cfg     Config
	index   map[string]int // tenant name -> index
	mu      sync.Mutex
	sent    []sendRec
	runs    map[string][]startRec // task ID -> runs
	current []counts
}

// Run runs the scenario until cfg.Duration has passed and deferred tasks
// have drained, or ctx ends; then it checks the outcome. An error means the
// run could not be set up or inspected; failed checks are reported in the
// Result.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = withDefaults(cfg)
	r := &run{cfg: cfg, index: map[string]int{}, runs: map[string][]startRec{}, current: make([]counts, len(cfg.Tenants))}
	for i, t := range cfg.Tenants {
		if err := admission.ValidateTenant(t.Name); err != nil {
			return Result{}, err
		}
		if err := t.Quota.Validate(); err != nil {
			return Result{}, fmt.Errorf("tenant %q: %w", t.Name, err)
		}
		if t.Rate <= 0 {
			return Result{}, fmt.Errorf("tenant %q: rate %v, want more than 0", t.Name, t.Rate)
		}
		r.index[t.Name] = i
	}
	return r.run(ctx)
}

func withDefaults(cfg Config) Config {
	if cfg.Tenants == nil {
		cfg.Tenants = DefaultTenants()
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 20 * time.Second
	}
	if cfg.Drain <= 0 {
		for _, t := range cfg.Tenants {
			cfg.Drain = max(cfg.Drain, t.Quota.MaxDelay)
		}
		cfg.Drain += 3 * time.Second
	}
	if cfg.Work <= 0 {
		cfg.Work = 20 * time.Millisecond
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

func (r *run) run(ctx context.Context) (Result, error) {
	cfg := r.cfg
	// Cleanup and inspection must work after an interrupt too.
	bg := context.WithoutCancel(ctx)

	opts := []admission.Option{admission.WithPrefix(cfg.Prefix), admission.WithTimeout(cfg.Timeout)}
	quotas := admission.NewRedisQuotas(cfg.Redis, opts...)
	for _, t := range cfg.Tenants {
		if err := quotas.Set(ctx, t.Name, t.Quota); err != nil {
			return Result{}, err
		}
	}
	defer func() {
		for _, t := range cfg.Tenants {
			_ = quotas.Delete(bg, t.Name)
		}
	}()
	gate := admission.New(cfg.Redis, quotas, opts...)
	defer gate.Close()
	client := enqueue.NewFromRedis(cfg.Redis, gate)
	clock, err := readClock(ctx, cfg.Redis)
	if err != nil {
		return Result{}, fmt.Errorf("reading Redis time: %w", err)
	}

	var mw []asynq.MiddlewareFunc
	if cfg.Metrics != nil {
		mw = append(mw, cfg.Metrics.Middleware())
	}
	w := worker.New(cfg.Worker, worker.Config{
		Concurrency: cfg.Concurrency,
		Queues:      map[string]int{cfg.Queue: 1},
		Logger:      cfg.Logger,
		Middleware:  mw,
		// Promote deferred tasks within 100 ms of their slot, not a
		// second, so that starts line up with slots second by second.
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		TaskCheckInterval:        100 * time.Millisecond,
		ShutdownTimeout:          5 * time.Second,
	})
	if err := w.Start(asynq.HandlerFunc(r.handle)); err != nil {
		return Result{}, fmt.Errorf("starting the worker: %w", err)
	}
	workerUp := true
	defer func() {
		if workerUp {
			w.Shutdown()
		}
	}()

	// Start on a whole second, so that seconds of the report line up with
	// whole-second slots.
	now := time.Now()
	start := now.Truncate(time.Second).Add(time.Second)
	if !sleepUntil(ctx, start) {
		return r.finish(bg, w, &workerUp, start, 0, clock, true)
	}
	sendCtx, stopSending := context.WithDeadline(ctx, start.Add(cfg.Duration))
	defer stopSending()
	var producers sync.WaitGroup
	for i := range cfg.Tenants {
		producers.Go(func() { r.produce(sendCtx, ctx, client, i, start) })
	}

	interrupted := false
	sending := true
	for n := 1; ; n++ {
		if !sleepUntil(ctx, start.Add(time.Duration(n)*time.Second)) {
			interrupted = true
			break
		}
		if sending && !time.Now().Before(start.Add(cfg.Duration)) {
			sending = false
			producers.Wait()
		}
		// Second n covers [n-1, n) after start; it drains if sending
		// had ended when it began.
		r.report(bg, gate, n, time.Duration(n-1)*time.Second >= cfg.Duration)
		if !sending && (r.drained() || time.Since(start) >= cfg.Duration+cfg.Drain) {
			break
		}
	}
	stopSending()
	producers.Wait()
	return r.finish(bg, w, &workerUp, start, min(time.Since(start), cfg.Duration), clock, interrupted)
}

// produce sends tenant i's tasks on schedule until pace ends. Each call runs
// on ctx, so that the end of sending does not cut a call short.
func (r *run) produce(pace, ctx context.Context, client *enqueue.Client, i int, start time.Time) {
	t := r.cfg.Tenants[i]
	every := time.Duration(float64(time.Second) / t.Rate)
	for k := 0; ; k++ {
		if !sleepUntil(pace, start.Add(time.Duration(k)*every)) {
			return
		}
		id := r.cfg.Prefix + "-" + t.Name + "-" + strconv.Itoa(k)
		task := asynq.NewTask("demo:work", nil)
		_, d, err := client.Enqueue(ctx, t.Name, task, asynq.Queue(r.cfg.Queue), asynq.TaskID(id))
		rec := sendRec{tenant: i, id: id, at: time.Now(), d: d, err: err}
		var rej *enqueue.RejectedError
		if errors.As(err, &rej) {
			rec.d, rec.err = rej.Decision, nil
		}
		if r.cfg.Metrics != nil && (err == nil || rej != nil) {
			r.cfg.Metrics.ObserveDecision(rec.d)
		}
		r.mu.Lock()
		r.sent = append(r.sent, rec)
		c := &r.current[i]
		switch {
		case rec.err != nil:
			c.errors++
		case rec.d.Outcome == admission.Admitted:
			c.admitted++
		case rec.d.Outcome == admission.Deferred:
			c.deferred++
		default:
			c.rejected++
		}
		r.mu.Unlock()
	}
}

func (r *run) handle(ctx context.Context, t *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	tenant := worker.Tenant(ctx)
	rec := startRec{tenant: tenant, start: time.Now()}
	r.mu.Lock()
	r.runs[id] = append(r.runs[id], rec)
	n := len(r.runs[id]) - 1
	r.mu.Unlock()

	timer := time.NewTimer(r.cfg.Work)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
	}

	r.mu.Lock()
	r.runs[id][n].done = true
	if i, ok := r.index[tenant]; ok {
		r.current[i].processed++
	}
	r.mu.Unlock()
	return nil
}

// report hands the second that just ended to OnSecond.
func (r *run) report(ctx context.Context, gate *admission.Gate, n int, draining bool) {
	r.mu.Lock()
	cur := r.current
	r.current = make([]counts, len(cur))
	r.mu.Unlock()
	if r.cfg.OnSecond == nil {
		return
	}
	s := Second{N: n, Draining: draining}
	for i, t := range r.cfg.Tenants {
		c := cur[i]
		st := SecondTenant{
			Tenant: t.Name, Admitted: c.admitted, Deferred: c.deferred, Rejected: c.rejected,
			Errors: c.errors, Processed: c.processed, Limit: t.Quota.Limit,
		}
		if u, err := gate.Usage(ctx, t.Name); err != nil {
			st.UsageErr = err
		} else {
			st.InWindow, st.Ahead = u.InWindow, u.Reserved
		}
		s.Tenants = append(s.Tenants, st)
	}
	r.cfg.OnSecond(s)
}

// drained reports whether every task enqueued so far has run to the end.
func (r *run) drained() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.sent {
		if s.err != nil || s.d.Outcome == admission.Rejected {
			continue
		}
		if !finished(r.runs[s.id]) {
			return false
		}
	}
	return true
}

func finished(runs []startRec) bool {
	for _, x := range runs {
		if x.done {
			return true
		}
	}
	return false
}

// finish stops the worker and checks the run.
func (r *run) finish(ctx context.Context, w *worker.Worker, workerUp *bool, start time.Time, sending time.Duration, clock clock, interrupted bool) (Result, error) {
	w.Shutdown()
	*workerUp = false

	res := Result{Start: start, Sending: sending, Elapsed: max(time.Since(start), 0), Interrupted: interrupted, Bound: true, NothingLost: true}
	insp := asynq.NewInspectorFromRedisClient(r.cfg.Redis)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, t := range r.cfg.Tenants {
		tr := TenantResult{Tenant: t}
		var slots []time.Time
		var delays []time.Duration
		startedAt := func(at time.Time) {
			k := int(at.Sub(start) / time.Second)
			if k < 0 {
				return
			}
			for len(tr.Started) <= k {
				tr.Started = append(tr.Started, 0)
			}
			tr.Started[k]++
		}
		for _, s := range r.sent {
			if s.tenant != i {
				continue
			}
			tr.Sent++
			if k := int(s.at.Sub(start) / time.Second); k >= 0 {
				for len(tr.SentPerSecond) <= k {
					tr.SentPerSecond = append(tr.SentPerSecond, 0)
				}
				tr.SentPerSecond[k]++
			}
			switch {
			case s.err != nil:
				tr.Errors++
				continue
			case s.d.Outcome == admission.Rejected:
				tr.Rejected++
				continue
			case s.d.Outcome == admission.Admitted:
				tr.Admitted++
			default:
				tr.Deferred++
			}
			slots = append(slots, s.d.At)
			runs := r.runs[s.id]
			if len(runs) > 0 {
				first := runs[0].start
				startedAt(first)
				// Compare on Redis time, where the slot lives.
				delay := first.Add(clock.offset).Sub(s.d.At)
				if delay < -clock.tolerance {
					tr.StartedEarly++
				}
				delays = append(delays, max(delay, 0))
			}
			switch {
			case finished(runs):
				tr.Processed++
				tr.Duplicates += len(runs) - 1
			case inAsynq(insp, r.cfg.Queue, s.id):
				tr.Waiting++
			default:
				tr.Lost++
			}
		}
		tr.Slots = len(slots)
		tr.MaxInWindow = maxInWindow(slots, t.Quota.Window)
		tr.BusiestSecond = slices.Max(append([]int{0}, tr.Started...))
		tr.DelayP50, tr.DelayP99, tr.DelayMax = percentiles(delays)
		if tr.MaxInWindow > t.Quota.Limit || tr.StartedEarly > 0 {
			res.Bound = false
		}
		if tr.Lost > 0 {
			res.NothingLost = false
		}
		res.Tenants = append(res.Tenants, tr)
	}
	// The queue is the run's own; tasks still in it (after an interrupt)
	// have been counted, and no worker will come for them.
	_ = insp.DeleteQueue(r.cfg.Queue, true)
	// DeleteQueue leaves the queue's counters behind.
	unlinkMatching(ctx, r.cfg.Redis, "asynq:{"+r.cfg.Queue+"}:*")
	return res, nil
}

// unlinkMatching removes the keys that match pattern, on every master of a
// cluster.
func unlinkMatching(ctx context.Context, rdb redis.UniversalClient, pattern string) {
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 100).Iterator()
		for iter.Next(ctx) {
			c.Unlink(ctx, iter.Val())
		}
		return iter.Err()
	}
	switch c := rdb.(type) {
	case *redis.Client:
		_ = scan(ctx, c)
	case *redis.ClusterClient:
		_ = c.ForEachMaster(ctx, scan)
	}
}

func inAsynq(insp *asynq.Inspector, queue, id string) bool {
	info, err := insp.GetTaskInfo(queue, id)
	return err == nil && info.State != asynq.TaskStateCompleted && info.State != asynq.TaskStateArchived
}

// maxInWindow returns the most slots that fall in any half-open window
// (t-window, t]. It is exact: the busiest window ends on a slot.
func maxInWindow(slots []time.Time, window time.Duration) int {
	s := slices.Clone(slots)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	best, lo := 0, 0
	for hi := range s {
		for s[hi].Sub(s[lo]) >= window {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

func percentiles(ds []time.Duration) (p50, p99, top time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration {
		return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
	}
	return at(0.50), at(0.99), s[len(s)-1]
}

// clock relates local time, when tasks start, to Redis time, which slots
// are in.
type clock struct {
	offset    time.Duration // Redis time minus local time
	tolerance time.Duration // how far off offset may be
}

// readClock estimates the offset from one TIME call; its uncertainty is
// half the round trip.
func readClock(ctx context.Context, rdb redis.UniversalClient) (clock, error) {
	before := time.Now()
	t, err := rdb.Time(ctx).Result()
	if err != nil {
		return clock{}, err
	}
	rtt := time.Since(before)
	return clock{
		offset:    t.Sub(before.Add(rtt / 2)),
		tolerance: rtt/2 + time.Millisecond, // Redis TIME has µs resolution
	}, nil
}

// sleepUntil waits until t and reports whether ctx is still live.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
