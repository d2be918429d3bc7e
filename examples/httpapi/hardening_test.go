package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestIdempotencyKeysAreShortPrintableASCII: a key becomes a task ID and a
// gate entry, so a 900,000-byte one would cost Redis megabytes.
func TestIdempotencyKeysAreShortPrintableASCII(t *testing.T) {
	t.Parallel()
	base, inspector := newTestServer(t, admission.Quota{Limit: 100, Window: time.Minute})
	url := base + "/tenants/acme/jobs"
	for _, c := range []struct {
		desc, key string
		want      int
	}{
		{"200 bytes", strings.Repeat("k", 200), http.StatusAccepted},
		{"a UUID", "3f2504e0-4f89-11d3-9a0c-0305e82c3301", http.StatusAccepted},
		{"201 bytes", strings.Repeat("k", 201), http.StatusBadRequest},
		{"900,000 bytes", strings.Repeat("k", 900_000), http.StatusBadRequest},
		{"a tab", "order\t42", http.StatusBadRequest},
		{"UTF-8", "commande-é", http.StatusBadRequest},
		{"DEL", "order\x7f", http.StatusBadRequest},
	} {
		t.Run(c.desc, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"type":"t"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header["Idempotency-Key"] = []string{c.key}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				if c.want == http.StatusBadRequest {
					// Go's client refuses to send it; checkIdempotencyKey
					// is checked on its own below.
					if checkIdempotencyKey(c.key) == nil {
						t.Errorf("checkIdempotencyKey(%q) is nil", c.key)
					}
					return
				}
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want && !(c.want == http.StatusBadRequest && resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge) {
				t.Errorf("status %d, want %d: %s", resp.StatusCode, c.want, body)
			}
			if c.want == http.StatusBadRequest && len(c.key) < 1000 && !strings.Contains(string(body), "Idempotency-Key") {
				t.Errorf("the error does not name the header: %s", body)
			}
		})
	}
	qi, err := inspector.GetQueueInfo("default")
	if err != nil {
		t.Fatal(err)
	}
	if qi.Pending != 2 {
		t.Errorf("%d jobs queued, want 2", qi.Pending)
	}
}

// TestRunSaysListeningOnlyOnceItIs: an address in use (the dashboard's,
// say) is an error, with no "listening" line before it.
func TestRunSaysListeningOnlyOnceItIs(t *testing.T) {
	srv := redistest.Start(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var log bytes.Buffer
	cfg := config{redis: srv.Addr(), addr: busy.Addr().String(), quota: admission.Quota{Limit: 1, Window: time.Second}}
	err = run(t.Context(), cfg, slog.New(slog.NewTextHandler(&log, nil)))
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("run on a busy address = %v", err)
	}
	if strings.Contains(log.String(), "listening") {
		t.Errorf("logged listening before failing:\n%s", log.String())
	}
}

// TestRunServesMetricsAndQuotasFromRedis: admitq quota set applies, and
// /metrics counts the decisions for admitq dashboard.
func TestRunServesMetricsAndQuotasFromRedis(t *testing.T) {
	srv := redistest.Start(t)
	if err := admission.NewRedisQuotas(srv.Client(t)).Set(t.Context(), "acme", admission.Quota{Limit: 1, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, config{redis: srv.Addr(), addr: addr, quota: admission.Quota{Limit: 100, Window: time.Second}}, slog.New(slog.DiscardHandler))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var statuses []int
	deadline := time.Now().Add(10 * time.Second)
	for len(statuses) < 2 {
		resp, err := http.Post("http://"+addr+"/tenants/acme/jobs", "application/json", strings.NewReader(`{"type":"t"}`))
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
	}
	if statuses[0] != http.StatusAccepted || statuses[1] != http.StatusTooManyRequests {
		t.Errorf("statuses %v, want 202 then 429 (the quota in Redis, 1/1m)", statuses)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`admitq_gate_decisions_total{outcome="admitted",tenant="acme"} 1`, `admitq_gate_decisions_total{outcome="rejected",tenant="acme"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
}
