package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"go.uber.org/goleak"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer is a bytes.Buffer safe for the worker's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestHandlerLogsTheTenant enqueues a task through admitq and waits for the
// worker to log it with its tenant.
func TestHandlerLogsTheTenant(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	q := admission.Quota{Limit: 10, Window: time.Second}
	gate := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithTimeout(5*time.Second))
	defer gate.Close()
	client := enqueue.New(asynq.NewClientFromRedisClient(rdb), gate)
	info, _, err := client.Enqueue(context.Background(), "globex", asynq.NewTask("example:hello", []byte(`{"n":1}`)))
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}

	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	w, err := newWorker(context.Background(), config{redis: srv.URL(), concurrency: 2}, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(newHandler(log)); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() { w.Shutdown(); w.Close() }()

	want := `msg=task tenant=globex type=example:hello id=` + info.ID + ` payload="{\"n\":1}"`
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the handler did not log %q in 10s; log:\n%s", want, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A worker whose Redis cannot be reached stops at once, naming the cause,
// rather than retrying for ever.
func TestNewWorkerChecksRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	start := time.Now()
	w, err := newWorker(context.Background(), config{redis: addr, concurrency: 1}, slog.New(slog.DiscardHandler))
	if w != nil || err == nil || !strings.Contains(err.Error(), "cannot reach Redis at "+addr) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("newWorker = %v, %v; want an error naming %s and the refused connection", w, err, addr)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v to give up", d)
	}
}

// ADMITQ_REDIS is named when its value is wrong; -redis when the flag's is.
func TestParseFlagsNamesTheBadAddress(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{nil, "a:b:c", "worker: ADMITQ_REDIS a:b:c: "},
		{[]string{"-redis", "redis://a:b:c"}, "", "worker: -redis redis://a:b:c: "},
		{[]string{"-redis", "host:port"}, "127.0.0.1:6379", "worker: -redis host:port: "},
		{nil, "alice:AlicePw%2342@host:port", "worker: ADMITQ_REDIS xxxxx@host:port: "},
	} {
		var stderr strings.Builder
		_, err := parseFlags(c.args, func(string) string { return c.env }, &stderr)
		if err == nil || !strings.HasPrefix(stderr.String(), c.want) || strings.Contains(stderr.String(), "AlicePw") {
			t.Errorf("parseFlags(%q) with ADMITQ_REDIS=%q: err %v, stderr %q; want it to start %q", c.args, c.env, err, stderr.String(), c.want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		desc    string
		args    []string
		env     map[string]string
		want    config
		wantErr bool
	}{
		{desc: "defaults", want: config{redis: "127.0.0.1:6379", concurrency: 10, metricsAddr: defaultMetricsAddr}},
		{desc: "ADMITQ_REDIS sets the address", env: map[string]string{"ADMITQ_REDIS": "r:1"}, want: config{redis: "r:1", concurrency: 10, metricsAddr: defaultMetricsAddr}},
		{desc: "flags win", args: []string{"-redis", "s:2", "-concurrency", "3"}, env: map[string]string{"ADMITQ_REDIS": "r:1"}, want: config{redis: "s:2", concurrency: 3, metricsAddr: defaultMetricsAddr}},
		{desc: "ADMITQ_REDIS may be a URL", env: map[string]string{"ADMITQ_REDIS": "redis://r:1/2"}, want: config{redis: "redis://r:1/2", concurrency: 10, metricsAddr: defaultMetricsAddr}},
		{desc: "no concurrency", args: []string{"-concurrency", "0"}, wantErr: true},
		{desc: "a bad address", args: []string{"-redis", "redis://a:b:c"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := parseFlags(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseFlags: err = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(config{})); !tc.wantErr && diff != "" {
				t.Errorf("config mismatch (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestACappedTenantsParkedTasksAllRun: the worker has a gate, so a tenant
// capped at 2 in flight (set as admitq quota set does, in Redis) has its
// tasks past the cap wait and then run, all of them, and /metrics counts
// their starts.
func TestACappedTenantsParkedTasksAllRun(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	quotas := admission.NewRedisQuotas(rdb)
	if err := quotas.Set(t.Context(), "noisy", admission.Quota{Limit: 100, Window: time.Second, MaxInFlight: 2, MaxParked: 5}); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	w, err := newWorker(t.Context(), config{redis: srv.URL(), concurrency: 4, metricsAddr: "127.0.0.1:0"}, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	// Slow tasks, so that the cap is reached.
	slow := asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		time.Sleep(200 * time.Millisecond)
		return newHandler(log).ProcessTask(ctx, task)
	})
	if err := w.Start(slow); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer func() { w.Shutdown(); w.Close() }()

	gate := admission.New(rdb, quotas, admission.WithTimeout(5*time.Second))
	defer gate.Close()
	client := enqueue.New(asynq.NewClientFromRedisClient(rdb), gate)
	// The producer sees a worker with a gate within a second of its start.
	time.Sleep(1500 * time.Millisecond)
	parked := 0
	for i := range 5 {
		_, d, err := client.Enqueue(t.Context(), "noisy", asynq.NewTask("example:hello", fmt.Appendf(nil, `{"n":%d}`, i)))
		if err != nil {
			t.Fatalf("Enqueue %d: %v", i, err)
		}
		if d.Outcome == admission.Parked {
			parked++
		}
	}
	if parked == 0 {
		t.Error("no task waited behind the cap: the worker's gate is not seen")
	}
	deadline := time.Now().Add(15 * time.Second)
	for strings.Count(out.String(), "tenant=noisy") < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 5 tasks ran in 15s (%d were parked); log:\n%s", strings.Count(out.String(), "tenant=noisy"), parked, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get(w.metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `admitq_tasks_started_total{tenant="noisy"} 5`) {
		t.Errorf("/metrics does not count 5 starts for noisy:\n%s", body)
	}
}

// The example's worker and admitq worker run side by side on one machine:
// their metrics ports differ.
func TestMetricsPortIsNotAdmitqWorkers(t *testing.T) {
	const admitqWorker = "127.0.0.1:9464" // cmd/admitq's defaultMetricsAddr
	if defaultMetricsAddr == admitqWorker {
		t.Errorf("defaultMetricsAddr is %s, admitq worker's default too", defaultMetricsAddr)
	}
}
