package dashboard

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/metrics"
	"github.com/admitq/admitq/worker"
)

const testQueue = "dash"

// stack is a real producer and worker on a real redis-server, counting in
// Prometheus metrics that a dashboard scrapes over HTTP, as it does in
// production.
type stack struct {
	srv     *redistest.Server
	rdb     *redis.Client
	quotas  *admission.RedisQuotas
	gate    *admission.Gate
	client  *enqueue.Client
	metrics *metrics.Metrics
	scrape  *httptest.Server
	log     *syncBuffer
}

func newStack(t *testing.T) *stack {
	t.Helper()
	srv := redistest.Start(t)
	s := &stack{srv: srv, rdb: srv.Client(t), log: &syncBuffer{}}
	s.quotas = admission.NewRedisQuotas(s.rdb)
	s.gate = admission.New(s.rdb, s.quotas)
	t.Cleanup(func() { _ = s.gate.Close() })
	s.client = enqueue.NewFromRedis(s.rdb, s.gate)
	s.metrics = metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.metrics)
	s.scrape = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(s.scrape.Close)
	return s
}

// startWorker runs a real worker, counting task starts in s.metrics.
func (s *stack) startWorker(t *testing.T) {
	t.Helper()
	w := worker.New(asynq.RedisClientOpt{Addr: s.srv.Addr()}, worker.Config{
		Concurrency:       4,
		Queues:            map[string]int{testQueue: 1},
		TaskCheckInterval: 50 * time.Millisecond,
		ShutdownTimeout:   2 * time.Second,
		Middleware:        []asynq.MiddlewareFunc{s.metrics.Middleware()},
		Logger:            slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	err := w.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		time.Sleep(20 * time.Millisecond)
		return nil
	}))
	if err != nil {
		t.Fatalf("worker Start: %v", err)
	}
	t.Cleanup(w.Shutdown)
}

// send enqueues n tasks for tenant and counts each decision in s.metrics,
// as a producer does.
func (s *stack) send(t *testing.T, tenant string, n int) {
	t.Helper()
	for range n {
		_, d, err := s.client.Enqueue(t.Context(), tenant, asynq.NewTask("job", nil), asynq.Queue(testQueue))
		if err != nil && d.Outcome != admission.Rejected {
			t.Fatalf("enqueue %s: %v", tenant, err)
		}
		s.metrics.ObserveDecision(d)
	}
}

func (s *stack) setQuota(t *testing.T, tenant string, q admission.Quota) {
	t.Helper()
	if err := s.quotas.Set(t.Context(), tenant, q); err != nil {
		t.Fatal(err)
	}
}

// dashboard serves a dashboard of s; cfg's Redis, Asynq, Queue, Sources and
// Logger are filled in.
func (s *stack) dashboard(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	cfg.Redis = s.rdb
	cfg.Asynq = asynq.RedisClientOpt{Addr: s.srv.Addr()}
	cfg.Queue = testQueue
	cfg.Sources = []Source{Scrape(s.scrape.URL, nil)}
	cfg.Logger = slog.New(slog.NewTextHandler(s.log, nil))
	if cfg.Every == 0 {
		cfg.Every = 300 * time.Millisecond
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(d)
	t.Cleanup(func() {
		hs.Close()
		_ = d.Close()
	})
	return d, hs
}

// syncBuffer is a log that handlers write to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

var _ http.Handler = (*Server)(nil)

// serve makes queue dispatched, as a worker with a gate would, but runs no
// task, until the test ends: producers then park capped tenants' tasks.
func (s *stack) serve(t *testing.T, queue string) {
	t.Helper()
	hold, err := dispatch.New(s.rdb, s.gate, nil).Serve(dispatch.Worker{Queues: []string{queue}, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hold.Close)
}
