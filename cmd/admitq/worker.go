package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/metrics"
	"github.com/admitq/admitq/worker"
)

// defaultMetricsAddr is loopback: metrics name tenants, which are not for
// everyone on the network.
const defaultMetricsAddr = "127.0.0.1:9464"

func (a *app) newWorkerCmd() *cobra.Command {
	var (
		concurrency int
		queues      string
		metricsAddr string
		sleep       time.Duration
		fair        bool
	)
	cmd := &cobra.Command{
		Use:   "worker [--concurrency N] [--queues q=w,...] [--fair] [--metrics-addr ADDR] [--sleep D]",
		Short: "Run a worker that logs every task, to try admitq end to end",
		Long: `Runs an asynq worker (package worker) that handles every task type by logging
it, optionally after sleeping to simulate work, until interrupted. It serves
Prometheus metrics (package metrics) at http://ADDR/metrics.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if concurrency < 1 {
				return usageErrorf("--concurrency %d: want at least 1", concurrency)
			}
			if sleep < 0 {
				return usageErrorf("--sleep %v: want 0 or more", sleep)
			}
			qs, err := parseQueues(queues)
			if err != nil {
				return usageError(err)
			}
			cfg, err := a.redisConfig()
			if err != nil {
				return err
			}
			// Check the server first, once, to fail in one line rather than
			// in asynq's retry logs; the asynq server makes its own clients.
			rdb, _, err := a.dialConfig(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer rdb.Close()

			log := slog.New(slog.NewTextHandler(a.stderr, nil))
			m := metrics.New()
			var srv *http.Server
			var addr string
			if metricsAddr != "" {
				ln, err := net.Listen("tcp", metricsAddr)
				if err != nil {
					return fmt.Errorf("--metrics-addr: %w", err)
				}
				addr = "http://" + ln.Addr().String() + "/metrics"
				reg := prometheus.NewRegistry()
				reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
				srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
				go func() { _ = srv.Serve(ln) }()
				defer func() {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					_ = srv.Shutdown(ctx)
				}()
			}

			// With the gate the worker serves its queues for the
			// dispatcher: capped tenants' parked tasks go in as theirs
			// finish, and with --fair the queues are shared by weight.
			gate := admission.New(rdb, admission.NewRedisQuotas(rdb, a.gateOptions()...), a.gateOptions()...)
			defer gate.Close()
			w := worker.New(connOpt{cfg}, worker.Config{
				Concurrency: concurrency,
				Queues:      qs,
				Logger:      log,
				Middleware:  []asynq.MiddlewareFunc{m.Middleware()},
				Gate:        gate,
				Fair:        fair,
				OnDispatch:  m.ObserveDispatch,
			})
			if err := w.Start(logHandler(log, sleep)); err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			log.Info("admitq worker started", "redis", cfg.display, "queues", queueList(qs),
				"concurrency", concurrency, "metrics", addr)
			<-cmd.Context().Done()
			w.Shutdown()
			log.Info("admitq worker stopped")
			return nil
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&concurrency, "concurrency", 10, "tasks handled at once")
	fs.StringVar(&queues, "queues", "default=1", "asynq queues and their weights, queue=weight,…")
	fs.StringVar(&metricsAddr, "metrics-addr", defaultMetricsAddr, `address to serve /metrics on; "" serves none`)
	fs.DurationVar(&sleep, "sleep", 0, "how long each task pretends to work")
	fs.BoolVar(&fair, "fair", false, "share the queues' workers among tenants by weight and worker time (fair dispatch)")
	return cmd
}

// logHandler logs each task, sleeping first if asked.
func logHandler(log *slog.Logger, sleep time.Duration) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if sleep > 0 {
			timer := time.NewTimer(sleep)
			select {
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			case <-timer.C:
			}
		}
		id, _ := asynq.GetTaskID(ctx)
		queue, _ := asynq.GetQueueName(ctx)
		attrs := []any{"tenant", worker.Tenant(ctx), "type", t.Type(), "id", id, "queue", queue, "payload_bytes", len(t.Payload())}
		if slot, ok := metrics.TaskSlot(t); ok {
			attrs = append(attrs, "since_slot", time.Since(slot).Round(time.Millisecond))
		}
		log.InfoContext(ctx, "task", attrs...)
		return nil
	})
}

// parseQueues reads "critical=6,default=3,low=1". Every queue needs its
// weight: a bare name is more often a mistake (--queues 6, --queues
// critical:6) than a queue meant to weigh 1.
func parseQueues(s string) (map[string]int, error) {
	qs := make(map[string]int)
	for _, part := range strings.Split(s, ",") {
		name, w, hasW := strings.Cut(strings.TrimSpace(part), "=")
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("--queues %q: empty queue name", s)
		}
		if err := validateQueue("--queues: queue", name); err != nil {
			return nil, err
		}
		if !hasW {
			return nil, fmt.Errorf("--queues %q: queue %q has no weight; want queue=weight,…, e.g. %s=1", s, name, name)
		}
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--queues %q: weight %q of queue %q, want a whole number of at least 1", s, w, name)
		}
		if _, dup := qs[name]; dup {
			return nil, fmt.Errorf("--queues %q: queue %q given twice", s, name)
		}
		qs[name] = n
	}
	return qs, nil
}

// queueList writes queues back as the flag takes them, sorted.
func queueList(qs map[string]int) string {
	var parts []string
	for q, w := range qs {
		parts = append(parts, q+"="+strconv.Itoa(w))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
