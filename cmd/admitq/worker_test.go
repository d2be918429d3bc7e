package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/internal/redistest"
)

func TestWorkerServesMetrics(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	mustRun(t, append(base, "quota", "set", "acme", "--limit", "10", "--window", "1s")...)

	ctx, stop := context.WithCancel(t.Context())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
		done <- a.run(ctx, append(base, "worker", "--metrics-addr", "127.0.0.1:0", "--concurrency", "2"))
	}()
	t.Cleanup(func() {
		stop()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("worker exited %d:\n%s", code, errb.String())
			}
		case <-time.After(15 * time.Second):
			t.Error("worker did not stop within 15s of its context ending")
		}
	})

	addrRE := regexp.MustCompile(`metrics=(http://127\.0\.0\.1:\d+/metrics)`)
	var url string
	waitFor(t, 10*time.Second, "the worker to announce its metrics address", func() bool {
		m := addrRE.FindStringSubmatch(errb.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})

	for range 3 {
		mustRun(t, append(base, "enqueue", "--tenant", "acme", "--type", "email:send")...)
	}
	var body string
	waitFor(t, 10*time.Second, "3 processed tasks of acme in /metrics", func() bool {
		body = scrape(t, url)
		return strings.Contains(body, `admitq_tasks_processed_total{tenant="acme"} 3`)
	})
	for _, series := range []string{
		`admitq_tasks_failed_total{tenant="acme"} 0`,
		"go_goroutines ",
	} {
		if !strings.Contains(body, series) {
			t.Errorf("/metrics lacks %q:\n%s", series, body)
		}
	}
	// enqueue stamps each task's slot, so the worker measures queueing delay.
	if !strings.Contains(body, `admitq_queue_delay_seconds_count{tenant="acme"} 3`) {
		t.Errorf("/metrics lacks the queueing delay of the 3 tasks:\n%s", body)
	}
	if got := strings.Count(errb.String(), "msg=task tenant=acme type=email:send"); got != 3 {
		t.Errorf("worker logged %d tasks, want 3:\n%s", got, errb.String())
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
