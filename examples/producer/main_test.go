package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

func TestRun(t *testing.T) {
	// Limit 3 a second, deferrable by 2s: three tasks are admitted, the next
	// three deferred to the first slot the window frees, a second on,
	// rounded up to a whole second (at most 2s ahead), and the rest
	// rejected: their slot would be a second later still, over 2s ahead.
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "one Enqueue per task", true: "EnqueueBatch"}[batch], func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			cfg := config{
				redis: srv.Addr(), tenant: "acme", taskType: "example:hello", n: 8, batch: batch,
				quota: admission.Quota{Limit: 3, Window: time.Second, MaxDelay: 2 * time.Second},
			}
			var out strings.Builder
			if err := run(context.Background(), cfg, &out); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			var got []string
			for _, l := range lines[:len(lines)-1] {
				got = append(got, strings.Fields(l)[2]) // "task  1: admitted, ..."
			}
			want := []string{"admitted,", "admitted,", "admitted,", "deferred,", "deferred,", "deferred,", "rejected,", "rejected,"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("outcomes mismatch (-want,+got):\n%s\noutput:\n%s", diff, out.String())
			}
			if summary := lines[len(lines)-1]; !strings.Contains(summary, "3 admitted, 3 deferred, 0 parked, 2 rejected, 0 failed") {
				t.Errorf("summary = %q", summary)
			}
			in := asynq.NewInspectorFromRedisClient(srv.Client(t))
			qi, err := in.GetQueueInfo("default")
			if err != nil {
				t.Fatal(err)
			}
			if qi.Pending != 3 || qi.Scheduled != 3 {
				t.Errorf("queue: %d pending, %d scheduled; want 3 and 3", qi.Pending, qi.Scheduled)
			}
		})
	}
}

// A producer whose Redis cannot be reached stops before its first task,
// naming the cause.
func TestRunChecksRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out strings.Builder
	cfg := config{redis: addr, tenant: "acme", taskType: "t", n: 3, quota: admission.Quota{Limit: 1, Window: time.Second}}
	err = run(context.Background(), cfg, &out)
	if err == nil || !strings.Contains(err.Error(), "cannot reach Redis at "+addr) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("run = %v, want an error naming %s and the refused connection", err, addr)
	}
	if out.Len() != 0 {
		t.Errorf("run printed %q before giving up", out.String())
	}
}

// -redis and ADMITQ_REDIS take a redis:// URL as well as host:port, as the
// admitq command does.
func TestRunTakesARedisURL(t *testing.T) {
	srv := redistest.Start(t)
	var out strings.Builder
	cfg := config{redis: srv.URL() + "/2", tenant: "acme", taskType: "t", n: 1, quota: admission.Quota{Limit: 1, Window: time.Second}}
	if err := run(context.Background(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 2})
	defer c.Close()
	if n := c.DBSize(context.Background()).Val(); n == 0 {
		t.Errorf("database 2 of the URL is empty after run")
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
		{
			desc: "defaults",
			want: config{redis: "127.0.0.1:6379", tenant: "acme", taskType: "example:hello", n: 20,
				quota: admission.Quota{Limit: 5, Window: time.Second, MaxDelay: 2 * time.Second}},
		},
		{
			desc: "ADMITQ_REDIS sets the default address, -redis wins over it",
			args: []string{"-redis", "b:1", "-n", "3", "-batch", "-tenant", "globex"},
			env:  map[string]string{"ADMITQ_REDIS": "a:1"},
			want: config{redis: "b:1", tenant: "globex", taskType: "example:hello", n: 3, batch: true,
				quota: admission.Quota{Limit: 5, Window: time.Second, MaxDelay: 2 * time.Second}},
		},
		{desc: "an invalid quota", args: []string{"-window", "0s"}, wantErr: true},
		{desc: "a bad address from the environment", env: map[string]string{"ADMITQ_REDIS": "a:b:c"}, wantErr: true},
		{desc: "a negative count", args: []string{"-n", "-1"}, wantErr: true},
		{desc: "an empty tenant", args: []string{"-tenant", ""}, wantErr: true},
		{desc: "an extra argument", args: []string{"acme"}, wantErr: true},
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

// TestTheQuotaInRedisWins: admitq quota set applies to the producer; the
// flags' quota is for tenants Redis has none for.
func TestTheQuotaInRedisWins(t *testing.T) {
	srv := redistest.Start(t)
	if err := admission.NewRedisQuotas(srv.Client(t)).Set(t.Context(), "acme", admission.Quota{Limit: 2, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cfg := config{redis: srv.Addr(), tenant: "acme", taskType: "t", n: 4, quota: admission.Quota{Limit: 100, Window: time.Second}}
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "(quota 2/1m0s): 2 admitted, 0 deferred, 0 parked, 2 rejected") {
		t.Errorf("Redis's quota did not apply:\n%s", out.String())
	}
	out.Reset()
	cfg.tenant = "globex"
	if err := run(t.Context(), cfg, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "4 admitted") {
		t.Errorf("a tenant without a quota in Redis did not get the flags':\n%s", out.String())
	}
}

// TestTheProducerServesItsDecisions: with -metrics-addr the decisions are
// at /metrics, parked ones included, for admitq dashboard to chart.
func TestTheProducerServesItsDecisions(t *testing.T) {
	srv := redistest.Start(t)
	if err := admission.NewRedisQuotas(srv.Client(t)).Set(t.Context(), "noisy", admission.Quota{Limit: 100, Window: time.Second, MaxInFlight: 1}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(t.Context())
	out := &syncWriter{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, config{redis: srv.Addr(), tenant: "noisy", taskType: "t", n: 3, quota: admission.Quota{Limit: 1, Window: time.Second}, metricsAddr: addr}, out)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "metrics at") {
		if time.Now().After(deadline) {
			t.Fatalf("no metrics line:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	// Parked when a worker with a gate serves the queue, else admitted:
	// either way /metrics says what the output says.
	wants := []string{`admitq_gate_decisions_total{outcome="admitted",tenant="noisy"} 1`, `admitq_gate_decisions_total{outcome="parked",tenant="noisy"} 2`}
	if !strings.Contains(out.String(), "1 admitted, 0 deferred, 2 parked") {
		wants = []string{`admitq_gate_decisions_total{outcome="admitted",tenant="noisy"} 3`}
	}
	for _, want := range wants {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s\noutput:\n%s", want, body, out.String())
		}
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
