package demo

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/worktime"
	"github.com/admitq/admitq/worker"
)

// FairConfig is the fair scenario: a fair worker pool, first with one
// tenant alone, then with two tenants of weights 3 and 1 that both keep a
// backlog. Redis, Worker, Prefix, Queue and Logger are as in Config; zero
// fields take the defaults in brackets.
type FairConfig struct {
	Config
	// Tasks is how many tasks each phase sends per tenant [200 alone,
	// 300 each under contention].
	Tasks int
	// OnPhase, when set, hears each phase's name as it starts.
	OnPhase func(string)
}

// FairResult is what the fair scenario saw, and its checks.
type FairResult struct {
	// Alone is how long the lone tenant's tasks took on the fair pool, Bare
	// how long the same work took on bare asynq beside it, and Ideal how
	// long it takes on a pool that never idles.
	Alone, Bare, Ideal time.Duration
	// Ratio is gold's worker time over basic's while both had a backlog;
	// their weights are 3 and 1.
	Ratio float64
	// Sent and Ran count every task; Lost are IDs sent but never run,
	// Twice IDs run more than once.
	Sent, Ran   int
	Lost, Twice []string
	// FillsPool: the lone tenant's tasks took at most 1.5 × Bare.
	// Weighted: Ratio is within 2.4 and 3.6.
	// NothingLost: every task ran exactly once.
	FillsPool, Weighted, NothingLost bool
}

// RunFair runs the fair scenario to the end.
func RunFair(ctx context.Context, cfg FairConfig) (FairResult, error) {
	if cfg.Work <= 0 {
		cfg.Work = 20 * time.Millisecond
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.OnPhase == nil {
		cfg.OnPhase = func(string) {}
	}
	bg := context.WithoutCancel(ctx)
	def := admission.Quota{Limit: 100_000, Window: time.Second}
	gold := def
	gold.Weight = 3
	quotas := admission.StaticQuotas{Default: &def, Tenants: map[string]admission.Quota{"gold": gold}}
	gate := admission.New(cfg.Redis, quotas, admission.WithPrefix(cfg.Prefix), admission.WithTimeout(2*time.Second))
	defer gate.Close()
	client := enqueue.NewFromRedis(cfg.Redis, gate)
	insp := asynq.NewInspectorFromRedisClient(cfg.Redis)
	defer func() {
		unlinkMatching(bg, cfg.Redis, cfg.Prefix+":*")
		_ = insp.DeleteQueue(cfg.Queue, true)
	}()

	var mu sync.Mutex
	ran := map[string]int{}
	var spans []worktime.Run
	var res FairResult
	var sent []string
	send := func(tenant string, n int) error {
		tasks := make([]*asynq.Task, n)
		mu.Lock()
		for i := range tasks {
			id := cfg.Prefix + ":" + tenant + "-" + strconv.Itoa(len(sent))
			sent = append(sent, id)
			tasks[i] = asynq.NewTask("fair", nil, asynq.TaskID(id))
		}
		mu.Unlock()
		rs, err := client.EnqueueBatch(ctx, tenant, tasks, asynq.Queue(cfg.Queue))
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
	waitAll := func() error {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			mu.Lock()
			done := len(ran) >= len(sent)
			mu.Unlock()
			if done || time.Now().After(deadline) {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	// startPool starts the fair pool. Each phase first sends its backlog
	// while only a stand-in serves the queue (hold), so that the pool's
	// work is the dispatcher's, not the producers' pace.
	startPoolOn := func(queue string, gate *admission.Gate) (*worker.Worker, error) {
		w := worker.New(cfg.Worker, worker.Config{
			Concurrency: cfg.Concurrency, Queues: map[string]int{queue: 1},
			Gate: gate, Fair: gate != nil, ShutdownTimeout: 5 * time.Second, Logger: cfg.Logger,
		})
		return w, w.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			start := time.Now()
			time.Sleep(cfg.Work)
			mu.Lock()
			ran[id]++
			spans = append(spans, worktime.Run{Tenant: worker.Tenant(ctx), Start: start, End: time.Now()})
			mu.Unlock()
			return nil
		}))
	}
	startPool := func() (*worker.Worker, error) { return startPoolOn(cfg.Queue, gate) }
	// makespan is the pool's time: from the first start to the last end
	// (the producer may be slower than the pool).
	makespan := func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		first, last := worktime.Span(spans)
		return last.Sub(first)
	}
	hold := func() (*dispatch.Server, error) {
		return dispatch.New(cfg.Redis, gate, cfg.Logger).Serve(dispatch.Worker{
			Queues: []string{cfg.Queue}, Concurrency: cfg.Concurrency, Fair: true,
		})
	}
	// phase sends with the queue held, then runs the pool until every
	// task has run.
	phase := func(sendAll func() error) error {
		h, err := hold()
		if err != nil {
			return err
		}
		// Producers see a queue's workers within a second.
		select {
		case <-ctx.Done():
			h.Close()
			return ctx.Err()
		case <-time.After(1100 * time.Millisecond):
		}
		err = sendAll()
		w, serr := startPool()
		h.Close()
		if serr != nil {
			return serr
		}
		defer w.Shutdown()
		if err != nil {
			return err
		}
		return waitAll()
	}

	n := cfg.Tasks
	if n <= 0 {
		n = 200
	}
	cfg.OnPhase(fmt.Sprintf("alone: %d tasks of %v from one tenant on %d fair workers", n, cfg.Work, cfg.Concurrency))
	if err := phase(func() error { return send("solo", n) }); err != nil {
		return res, fmt.Errorf("solo: %w", err)
	}
	res.Alone, res.Ideal = makespan(), time.Duration(n)*cfg.Work/time.Duration(cfg.Concurrency)

	// The same work on bare asynq, in a queue of its own, as the yardstick.
	cfg.OnPhase(fmt.Sprintf("bare asynq: the same %d tasks, no dispatcher", n))
	mu.Lock()
	spans = spans[:0]
	mu.Unlock()
	bq := cfg.Queue + "-bare"
	defer func() { _ = insp.DeleteQueue(bq, true) }()
	bare := asynq.NewClientFromRedisClient(cfg.Redis)
	for i := range n {
		id := cfg.Prefix + ":bare-" + strconv.Itoa(i)
		mu.Lock()
		sent = append(sent, id)
		mu.Unlock()
		t := asynq.NewTaskWithHeaders("fair", nil, map[string]string{enqueue.TenantHeader: "solo"})
		if _, err := bare.EnqueueContext(ctx, t, asynq.Queue(bq), asynq.TaskID(id)); err != nil {
			return res, fmt.Errorf("bare: %w", err)
		}
	}
	bw, err := startPoolOn(bq, nil)
	if err != nil {
		return res, err
	}
	err = waitAll()
	bw.Shutdown()
	if err != nil {
		return res, err
	}
	res.Bare = makespan()

	if cfg.Tasks <= 0 {
		n = 300
	}
	cfg.OnPhase(fmt.Sprintf("contention: gold (weight 3) and basic (weight 1), %d tasks each", n))
	mu.Lock()
	spans = spans[:0]
	mu.Unlock()
	var begin time.Time
	err = phase(func() error {
		defer func() { begin = time.Now() }()
		if err := send("gold", n); err != nil {
			return err
		}
		return send("basic", n)
	})
	if err != nil {
		return res, err
	}

	mu.Lock()
	defer mu.Unlock()
	// Worker time while both had work: until either's last task started.
	_, until := worktime.Contended(spans, "gold", "basic")
	used := worktime.Used(spans, begin, until)
	if used["basic"] > 0 {
		res.Ratio = float64(used["gold"]) / float64(used["basic"])
	}
	for _, id := range sent {
		switch ran[id] {
		case 0:
			res.Lost = append(res.Lost, id)
		case 1:
		default:
			res.Twice = append(res.Twice, id)
		}
	}
	res.Sent, res.Ran = len(sent), len(ran)
	res.FillsPool = res.Alone <= res.Bare*3/2
	res.Weighted = res.Ratio >= 2.4 && res.Ratio <= 3.6
	res.NothingLost = len(res.Lost) == 0 && len(res.Twice) == 0
	return res, nil
}
