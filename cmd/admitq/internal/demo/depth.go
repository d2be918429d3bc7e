package demo

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/worker"
)

// DepthConfig is the depth scenario: a slow worker pool meets a noisy
// tenant that dumps a backlog at once, while a light tenant sends a task
// now and then. Both are capped by MaxInFlight. Redis, Worker, Prefix,
// Queue and Logger are as in Config; zero fields take the defaults in
// brackets.
type DepthConfig struct {
	Config
	// Backlog is the noisy tenant's tasks, sent at once [60].
	Backlog int
	// MaxInFlight caps each tenant [2].
	MaxInFlight int
	// Every is the light tenant's pace [250ms], for Duration [6s].
	Every time.Duration
	// OnDepth, when set, hears each tenant's usage once a second.
	OnDepth func(elapsed time.Duration, ds []admission.Usage)
}

// DepthResult is what the depth scenario saw, and its checks.
type DepthResult struct {
	// MostInQueue is the most tasks of each tenant seen pending or active
	// in asynq at once, sampled every 20ms; Cap is their MaxInFlight.
	MostInQueue map[string]int
	Cap         int
	// Sent and Ran count each tenant's tasks; Lost are IDs sent but never
	// run, Twice IDs run more than once.
	Sent, Ran   map[string]int
	Lost, Twice []string
	// LightWorst is the light tenant's longest wait from Enqueue to start.
	LightWorst time.Duration
	// Bound: no tenant ever had more than Cap tasks in the queue.
	// NothingLost: every task sent ran exactly once, nothing is left parked.
	Bound, NothingLost bool
}

// RunDepth runs the depth scenario to the end: until every task sent has
// run, or ctx ends.
func RunDepth(ctx context.Context, cfg DepthConfig) (DepthResult, error) {
	if cfg.Backlog <= 0 {
		cfg.Backlog = 60
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 2
	}
	if cfg.Every <= 0 {
		cfg.Every = 250 * time.Millisecond
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 6 * time.Second
	}
	if cfg.Work <= 0 {
		cfg.Work = 100 * time.Millisecond
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 3
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	bg := context.WithoutCancel(ctx)
	opts := []admission.Option{admission.WithPrefix(cfg.Prefix)}
	q := admission.Quota{Limit: 1000, Window: time.Second, MaxInFlight: cfg.MaxInFlight, MaxParked: cfg.Backlog + 100}
	quotas := admission.StaticQuotas{Default: &q}
	gate := admission.New(cfg.Redis, quotas, opts...)
	defer gate.Close()
	client := enqueue.NewFromRedis(cfg.Redis, gate)
	insp := asynq.NewInspectorFromRedisClient(cfg.Redis)
	defer func() {
		unlinkMatching(bg, cfg.Redis, cfg.Prefix+":*")
		_ = insp.DeleteQueue(cfg.Queue, true)
	}()

	var mu sync.Mutex
	res := DepthResult{Cap: cfg.MaxInFlight, MostInQueue: map[string]int{}, Sent: map[string]int{}, Ran: map[string]int{}}
	sentAt := map[string]time.Time{}
	ran := map[string]int{}
	w := worker.New(cfg.Worker, worker.Config{
		Concurrency:       cfg.Concurrency,
		Queues:            map[string]int{cfg.Queue: 1},
		Gate:              gate,
		ShutdownTimeout:   5 * time.Second,
		Logger:            cfg.Logger,
	})
	if err := w.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		tenant := worker.Tenant(ctx)
		mu.Lock()
		ran[id]++
		res.Ran[tenant]++
		if tenant == "light" {
			res.LightWorst = max(res.LightWorst, time.Since(sentAt[id]))
		}
		mu.Unlock()
		time.Sleep(cfg.Work)
		return nil
	})); err != nil {
		return res, err
	}
	defer w.Shutdown()

	send := func(tenant string, n int) error {
		tasks := make([]*asynq.Task, n)
		ids := make([]string, n)
		mu.Lock()
		for i := range tasks {
			ids[i] = tenant + "-" + strconv.Itoa(res.Sent[tenant]+i)
			tasks[i] = asynq.NewTask("depth", nil, asynq.TaskID(cfg.Prefix+":"+ids[i]))
			sentAt[cfg.Prefix+":"+ids[i]] = time.Now()
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
		mu.Lock()
		res.Sent[tenant] += n
		mu.Unlock()
		return nil
	}

	// The sampler: each tenant's pending and active tasks, from asynq.
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			// Pending first, then active, counting each ID once: a task
			// dequeued between the two calls is in both lists. (Tasks
			// take 100ms, far longer than the two calls.)
			in := map[string]int{}
			seen := map[string]bool{}
			for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){insp.ListPendingTasks, insp.ListActiveTasks} {
				tis, err := list(cfg.Queue, asynq.PageSize(1000))
				if err != nil {
					continue
				}
				for _, ti := range tis {
					if !seen[ti.ID] {
						seen[ti.ID] = true
						in[ti.Headers[enqueue.TenantHeader]]++
					}
				}
			}
			mu.Lock()
			for t, n := range in {
				res.MostInQueue[t] = max(res.MostInQueue[t], n)
			}
			mu.Unlock()
		}
	}()
	defer func() {
		close(stop)
		<-sampled
	}()

	start := time.Now()
	if err := send("noisy", cfg.Backlog); err != nil {
		return res, fmt.Errorf("noisy backlog: %w", err)
	}
	report := func() {
		if cfg.OnDepth == nil {
			return
		}
		var us []admission.Usage
		for _, t := range []string{"noisy", "light"} {
			if u, err := gate.Usage(ctx, t); err == nil {
				us = append(us, u)
			}
		}
		cfg.OnDepth(time.Since(start).Round(time.Second), us)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	next := time.Now()
	for time.Since(start) < cfg.Duration {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
			report()
		case <-time.After(time.Until(next)):
			if err := send("light", 1); err != nil {
				return res, fmt.Errorf("light task: %w", err)
			}
			next = next.Add(cfg.Every)
		}
	}
	// Until every task has run.
	total := func() (sent, done int) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range res.Sent {
			sent += n
		}
		return sent, len(ran)
	}
	deadline := time.Now().Add(time.Duration(cfg.Backlog)*cfg.Work/time.Duration(cfg.MaxInFlight)*3 + 30*time.Second)
	for {
		sent, done := total()
		if done >= sent {
			break
		}
		if time.Now().After(deadline) {
			break // counted as lost below
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
			report()
		case <-time.After(20 * time.Millisecond):
		}
	}
	report()
	w.Shutdown()

	mu.Lock()
	defer mu.Unlock()
	for id := range sentAt {
		switch ran[id] {
		case 0:
			res.Lost = append(res.Lost, id)
		case 1:
		default:
			res.Twice = append(res.Twice, id)
		}
	}
	slices.Sort(res.Lost)
	slices.Sort(res.Twice)
	res.Bound = true
	for _, n := range res.MostInQueue {
		res.Bound = res.Bound && n <= cfg.MaxInFlight
	}
	parked := 0
	for _, t := range []string{"noisy", "light"} {
		if u, err := gate.Usage(bg, t); err == nil {
			parked += u.Parked
		}
	}
	res.NothingLost = len(res.Lost) == 0 && len(res.Twice) == 0 && parked == 0
	return res, nil
}
