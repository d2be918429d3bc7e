// Command worker processes the tasks that the producer and httpapi examples
// enqueue through admitq. Each handler knows its task's tenant
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
	"os"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/examples/internal/redisaddr"
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
	w, err := newWorker(context.Background(), cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	log.Info("worker running; Ctrl-C stops it", "redis", mustRedisOptions(cfg.redis).Addr, "concurrency", cfg.concurrency)
	// Run blocks until SIGINT or SIGTERM, then lets running tasks finish.
	if err := w.Run(newHandler(log)); err != nil {
		log.Error("worker", "err", err)
		os.Exit(1)
	}
}

type config struct {
	redis       string
	concurrency int
}

// parseFlags reads the command line, with defaults from the environment.
// Errors and usage go to stderr.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	redisAddr := getenv("ADMITQ_REDIS")
	if redisAddr == "" {
		redisAddr = redisaddr.Default
	}
	var cfg config
	fs.StringVar(&cfg.redis, "redis", redisAddr, "Redis: host:port or redis://[user:password@]host:port[/db] (env ADMITQ_REDIS)")
	fs.IntVar(&cfg.concurrency, "concurrency", 10, "tasks handled at once")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if err := redisaddr.CheckFlag(fs, cfg.redis); err != nil {
		fmt.Fprintln(stderr, err)
		return config{}, err
	}
	if cfg.concurrency < 1 {
		err := fmt.Errorf("-concurrency is %d, want 1 or more", cfg.concurrency)
		fmt.Fprintln(stderr, err)
		return config{}, err
	}
	return cfg, nil
}

// newWorker checks that the Redis at cfg.redis answers, then returns a
// worker for it. Unchecked, a wrong address would have the worker retry for
// ever, logging each failure. worker.Config's zero values are sane: queue
// "default", and deferred tasks promoted every second, the resolution of
// their slots.
func newWorker(ctx context.Context, cfg config, log *slog.Logger) (*worker.Worker, error) {
	o := mustRedisOptions(cfg.redis)
	if err := redisaddr.Ping(ctx, o); err != nil {
		return nil, err
	}
	opt := asynq.RedisClientOpt{Network: o.Network, Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig}
	return worker.New(opt, worker.Config{
		Concurrency: cfg.concurrency,
		Logger:      log,
	}), nil
}

// mustRedisOptions is redisaddr.Options for an address parseFlags has checked.
func mustRedisOptions(s string) *redis.Options {
	o, err := redisaddr.Options(s)
	if err != nil {
		panic(err)
	}
	return o
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
