// Command producer enqueues a burst of tasks for one tenant through admitq
// and prints what the gate decided for each: admitted now, deferred to a
// slot, parked behind the tenant's in-flight cap, or rejected with a time to
// retry. Quotas come from Redis (admitq quota set), else from the flags. Run a worker (../worker) to see
// the tasks run, flattened to the tenant's quota.
//
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/examples/internal/redisaddr"
	"github.com/admitq/admitq/metrics"
)

func main() {
	redis.SetLogger(redisaddr.QuietLog{})
	cfg, err := parseFlags(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		os.Exit(2) // the error and the usage are printed already
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "producer:", err)
		os.Exit(1)
	}
}

type config struct {
	redis       string
	tenant      string
	taskType    string
	n           int
	batch       bool
	quota       admission.Quota
	metricsAddr string
}

// parseFlags reads the command line, with defaults from the environment.
// Errors and usage go to stderr.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("producer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	redisaddr.Var(fs, &cfg.redis)
	fs.StringVar(&cfg.tenant, "tenant", "acme", "tenant to enqueue for")
	fs.StringVar(&cfg.taskType, "type", "example:hello", "asynq task type")
	fs.IntVar(&cfg.n, "n", 20, "number of tasks to send")
	fs.BoolVar(&cfg.batch, "batch", false, "send all tasks in one EnqueueBatch instead of one Enqueue each")
	fs.IntVar(&cfg.quota.Limit, "limit", 5, "tasks the tenant may start in any window, when Redis holds no quota for it (admitq quota set)")
	fs.DurationVar(&cfg.quota.Window, "window", time.Second, "length of the sliding window, when Redis holds no quota for the tenant")
	fs.DurationVar(&cfg.quota.MaxDelay, "max-delay", 2*time.Second, "how far ahead a task may be deferred before it is rejected, when Redis holds no quota for the tenant")
	fs.StringVar(&cfg.metricsAddr, "metrics-addr", "", `address to serve Prometheus metrics on, at /metrics, until Ctrl-C; "" serves none`)
	fail := func(err error) (config, error) {
		fmt.Fprintln(stderr, "producer:", err)
		return config{}, err
	}
	// The flag package's own errors get the program's prefix too.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(out, "producer:", err)
		}
		fs.Usage()
		return config{}, err
	}
	if cfg.redis, err = redisaddr.Resolve(fs, cfg.redis, getenv); err != nil {
		return fail(err)
	}
	if err := admission.ValidateTenant(cfg.tenant); err != nil {
		return fail(fmt.Errorf("-tenant %q: %w", cfg.tenant, err))
	}
	if err := cfg.quota.Validate(); err != nil {
		return fail(err)
	}
	if cfg.n < 0 {
		return fail(fmt.Errorf("-n %d: want 0 or more", cfg.n))
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	return cfg, nil
}

// quotas reads each tenant's quota from Redis, so that admitq quota set
// (and the dashboard) apply here as they do to every producer; a tenant
// with none there, and no default there either, gets the flags' quota.
type quotas struct {
	redis *admission.RedisQuotas
	flags admission.Quota
}

func (q quotas) Quota(ctx context.Context, tenant string) (admission.Quota, error) {
	got, err := q.redis.Quota(ctx, tenant)
	if errors.Is(err, admission.ErrNoQuota) {
		return q.flags, nil
	}
	return got, err
}

// run sends cfg.n tasks and prints one line per task, then a summary.
// With cfg.metricsAddr it then serves the counts until ctx ends.
func run(ctx context.Context, cfg config, out io.Writer) error {
	opts, err := redisaddr.Options(cfg.redis)
	if err != nil {
		return err
	}
	if err := redisaddr.Ping(ctx, opts); err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	qs := quotas{redis: admission.NewRedisQuotas(rdb), flags: cfg.quota}
	gate := admission.New(rdb, qs)
	defer gate.Close()
	client := enqueue.NewFromRedis(rdb, gate)
	m := metrics.New()
	var metricsURL string
	if cfg.metricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.metricsAddr)
		if err != nil {
			return fmt.Errorf("-metrics-addr: %w", err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(m)
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		metricsURL = "http://" + ln.Addr().String() + "/metrics"
	}
	quota, err := qs.Quota(ctx, cfg.tenant)
	if err != nil {
		return err
	}

	tasks := make([]*asynq.Task, cfg.n)
	for i := range tasks {
		tasks[i] = asynq.NewTask(cfg.taskType, fmt.Appendf(nil, `{"n":%d}`, i+1))
	}
	var results []enqueue.Result
	if cfg.batch {
		rs, err := client.EnqueueBatch(ctx, cfg.tenant, tasks)
		if err != nil {
			return err
		}
		results = rs
	} else {
		for _, t := range tasks {
			info, d, err := client.Enqueue(ctx, cfg.tenant, t)
			results = append(results, enqueue.Result{Info: info, Decision: d, Err: err})
		}
	}

	count := make(map[string]int)
	for i, r := range results {
		var rej *enqueue.RejectedError
		if r.Err == nil || errors.As(r.Err, &rej) {
			m.ObserveDecision(r.Decision)
		}
		switch {
		case errors.As(r.Err, &rej):
			count["rejected"]++
			fmt.Fprintf(out, "task %2d: rejected, retry after %v\n", i+1, rej.RetryAfter().Round(time.Millisecond))
		case r.Err != nil:
			count["failed"]++
			fmt.Fprintf(out, "task %2d: failed: %v\n", i+1, r.Err)
		case r.Decision.Outcome == admission.Parked:
			count["parked"]++
			fmt.Fprintf(out, "task %2d: %s  id %s\n", i+1, client.WhyParked(ctx, r.Info), r.Info.ID)
		case r.Decision.Outcome == admission.Deferred:
			count["deferred"]++
			fmt.Fprintf(out, "task %2d: deferred, runs at %s (in %v)  id %s\n", i+1,
				r.Info.NextProcessAt.Format("15:04:05"), r.Decision.Delay().Round(time.Millisecond), r.Info.ID)
		case r.Decision.Outcome == admission.Admitted:
			count["admitted"]++
			fmt.Fprintf(out, "task %2d: admitted, runs now  id %s\n", i+1, r.Info.ID)
		default:
			// No error and no outcome: never print it as admitted.
			count["failed"]++
			fmt.Fprintf(out, "task %2d: failed: no decision (outcome %s)\n", i+1, r.Decision.Outcome)
		}
	}
	fmt.Fprintf(out, "%d sent for tenant %q (quota %v): %d admitted, %d deferred, %d parked, %d rejected, %d failed\n",
		cfg.n, cfg.tenant, quota, count["admitted"], count["deferred"], count["parked"], count["rejected"], count["failed"])
	if count["failed"] > 0 {
		return fmt.Errorf("%d tasks failed", count["failed"])
	}
	if metricsURL != "" {
		fmt.Fprintf(out, "metrics at %s until Ctrl-C\n", metricsURL)
		<-ctx.Done()
	}
	return nil
}
