// Command worker processes the tasks that the producer and httpapi examples
// enqueue through admitq, with a gate, so that a capped tenant's parked
// tasks move to the queue as its running ones end, and Prometheus metrics
// at /metrics for admitq dashboard. Each handler knows its task's tenant
// (worker.Tenant), so it can log it, bill it or pick the tenant's
// credentials for a downstream call.
//
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/examples/internal/redisaddr"
	"github.com/admitq/admitq/metrics"
	"github.com/admitq/admitq/worker"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		os.Exit(2) // the error and the usage are printed already
	}
	redis.SetLogger(redisaddr.QuietLog{})
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	svc, err := newWorker(context.Background(), cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	defer svc.Close()
	log.Info("worker running; Ctrl-C stops it", "redis", svc.redisAddr, "concurrency", cfg.concurrency, "metrics", svc.metricsURL)
	// Run blocks until SIGINT or SIGTERM, then lets running tasks finish.
	if err := svc.Run(newHandler(log)); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		svc.Close()
		os.Exit(1)
	}
}

type config struct {
	redis       string
	concurrency int
	metricsAddr string
}

// defaultMetricsAddr is one port above admitq worker's 127.0.0.1:9464, so
// that the two run side by side on one machine; admitq dashboard reads it
// with --metrics http://127.0.0.1:9465/metrics.
const defaultMetricsAddr = "127.0.0.1:9465"

// parseFlags reads the command line, with defaults from the environment.
// Errors and usage go to stderr.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	redisaddr.Var(fs, &cfg.redis)
	fs.IntVar(&cfg.concurrency, "concurrency", 10, "tasks handled at once")
	fs.StringVar(&cfg.metricsAddr, "metrics-addr", defaultMetricsAddr, `address to serve Prometheus metrics on, at /metrics; "" serves none`)
	// The flag package's own errors get the program's prefix too.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(out, "worker:", err)
		}
		fs.Usage()
		return config{}, err
	}
	if cfg.redis, err = redisaddr.Resolve(fs, cfg.redis, getenv); err != nil {
		fmt.Fprintln(stderr, "worker:", err)
		return config{}, err
	}
	if cfg.concurrency < 1 {
		err := fmt.Errorf("-concurrency %d: want 1 or more", cfg.concurrency)
		fmt.Fprintln(stderr, "worker:", err)
		return config{}, err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected argument %q", fs.Arg(0))
		fmt.Fprintln(stderr, "worker:", err)
		return config{}, err
	}
	return cfg, nil
}

// service is the worker and what it runs with: the gate that keeps
// capped tenants' MaxInFlight, its Redis client, and the metrics endpoint.
type service struct {
	*worker.Worker
	gate       *admission.Gate
	rdb        *redis.Client
	metrics    *http.Server // nil without -metrics-addr
	redisAddr  string
	metricsURL string
}

// newWorker checks that the Redis at cfg.redis answers, then returns a
// worker for it. Unchecked, a wrong address would have the worker retry for
// ever, logging each failure. worker.Config's zero values are sane: queue
// "default", and deferred tasks promoted every second, the resolution of
// their slots.
//
// The worker has a gate, with the quotas admitq quota set writes: without
// one, a capped tenant's (Quota.MaxInFlight) parked tasks would never
// move to the queue.
func newWorker(ctx context.Context, cfg config, log *slog.Logger) (*service, error) {
	o, err := redisaddr.Options(cfg.redis)
	if err != nil {
		return nil, err
	}
	if err := redisaddr.Ping(ctx, o); err != nil {
		return nil, err
	}
	svc := &service{rdb: redis.NewClient(o), redisAddr: o.Addr}
	svc.gate = admission.New(svc.rdb, admission.NewRedisQuotas(svc.rdb))
	m := metrics.New()
	if cfg.metricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.metricsAddr)
		if err != nil {
			svc.Close()
			return nil, fmt.Errorf("-metrics-addr: %w", err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(m)
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		svc.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		svc.metricsURL = "http://" + ln.Addr().String() + "/metrics"
		go func() { _ = svc.metrics.Serve(ln) }()
	}
	opt := asynq.RedisClientOpt{Network: o.Network, Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig}
	svc.Worker = worker.New(opt, worker.Config{
		Concurrency: cfg.concurrency,
		Gate:        svc.gate,
		Middleware:  []asynq.MiddlewareFunc{m.Middleware()},
		OnDispatch:  m.ObserveDispatch,
		Logger:      log,
	})
	return svc, nil
}

// Close stops the metrics endpoint and closes the gate and the Redis
// client, after the worker has stopped (Run returned, or Shutdown).
func (s *service) Close() {
	if s.metrics != nil {
		_ = s.metrics.Close()
		s.metrics = nil
	}
	if s.gate != nil {
		_ = s.gate.Close()
		s.gate = nil
	}
	if s.rdb != nil {
		_ = s.rdb.Close()
		s.rdb = nil
	}
}

// newHandler returns the handler for every task type: it logs the task with
// its tenant. A real handler would use asynq.ServeMux to route by type.
func newHandler(log *slog.Logger) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		log.InfoContext(ctx, "task",
			"tenant", worker.Tenant(ctx), "type", t.Type(), "id", id, "payload", string(t.Payload()))
		// A handler whose downstream answers "429, retry in 30s" for this
		// tenant would return worker.Throttled(30 * time.Second): the task
		// is retried then, without counting as a failure.
		return nil
	})
}
