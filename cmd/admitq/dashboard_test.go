package main

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/internal/redistest"
)

func TestDashboardRefusesANonLoopbackAddressWithoutAToken(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:8080", "example.com:8080"} {
		r := admitq(t, "--redis", "redis://127.0.0.1:1", "dashboard", "--addr", addr)
		if r.code != exitUsage || !strings.Contains(r.stderr, "is not a loopback address") || !strings.Contains(r.stderr, "--auth-token or ADMITQ_DASHBOARD_TOKEN") {
			t.Errorf("--addr %s without a token: %v", addr, r)
		}
		oneLine(t, addr, r.stderr)
	}
	if err := checkDashboardAddr("--addr", "0.0.0.0:8080", "tok", true); err != nil {
		t.Errorf("with a token: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:8080", "localhost:8080", "[::1]:8080"} {
		if err := checkDashboardAddr("--addr", addr, "", true); err != nil {
			t.Errorf("%s without a token: %v", addr, err)
		}
	}
}

// A queue name no worker could read is bad usage, found before the dial.
func TestDashboardRefusesABadQueue(t *testing.T) {
	t.Parallel()
	for _, q := range []string{"", "a b", "a\tb"} {
		r := admitq(t, "--redis", "redis://127.0.0.1:1", "dashboard", "--addr", "127.0.0.1:0", "--queue", q)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--queue") {
			t.Errorf("--queue %q: %v, want exit %d naming --queue", q, r, exitUsage)
		}
		oneLine(t, q, r.stderr)
	}
}

func TestDemoNamesDashboardAddrForANonLoopbackAddress(t *testing.T) {
	t.Parallel()
	r := admitq(t, "demo", "--dashboard", "--dashboard-addr", "0.0.0.0:0")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--dashboard-addr 0.0.0.0:0: 0.0.0.0 is not a loopback address") ||
		strings.Contains(r.stderr, "--addr") || strings.Contains(r.stderr, "--auth-token") {
		t.Errorf("demo --dashboard-addr 0.0.0.0:0: %v", r)
	}
	oneLine(t, "demo", r.stderr)
	// A --metrics-addr that is no host:port is bad usage, before the demo.
	r = admitq(t, "demo", "--metrics-addr", "bad:addr:x")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--metrics-addr bad:addr:x: want host:port") {
		t.Errorf("demo --metrics-addr bad:addr:x: %v", r)
	}
	oneLine(t, "demo --metrics-addr", r.stderr)
}

func TestDashboardWarnsOfAShortToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc, token string
		warn        bool
	}{
		{"one character", "a", true},
		{"15 characters", "0123456789abcde", true},
		{"16 characters", "0123456789abcdef", false},
	} {
		// Redis is unreachable: the warning comes before the dial.
		r := admitq(t, "--redis", "redis://127.0.0.1:1", "dashboard", "--addr", "127.0.0.1:0", "--auth-token", tc.token)
		if got := strings.Contains(r.stderr, "warning: the dashboard's token is"); got != tc.warn {
			t.Errorf("%s: warned %v, want %v: %v", tc.desc, got, tc.warn, r)
		}
		if len(tc.token) > 3 && strings.Contains(r.stderr, tc.token) {
			t.Errorf("%s: the warning shows the token: %v", tc.desc, r)
		}
	}
}

// runUntilCancelled runs the command in the background until the test ends.
func runUntilCancelled(t *testing.T, env map[string]string, args ...string) (stdout, stderr *syncBuffer) {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	stdout, stderr = &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		a := &app{stdout: stdout, stderr: stderr, getenv: func(k string) string { return env[k] }}
		done <- a.run(ctx, args)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case code := <-done:
			if code != 0 && code != 130 {
				t.Errorf("%s exited %d:\n%s", args, code, stderr.String())
			}
		case <-time.After(15 * time.Second):
			t.Errorf("%s did not stop within 15s of its context ending", args)
		}
	})
	return stdout, stderr
}

func waitForMatch(t *testing.T, buf *syncBuffer, re *regexp.Regexp, what string) string {
	t.Helper()
	var m []string
	waitFor(t, 20*time.Second, what, func() bool {
		m = re.FindStringSubmatch(buf.String())
		return m != nil
	})
	return m[1]
}

// TestDashboardShowsTheWorkersTaskStarts runs admitq worker and admitq
// dashboard as a user would: the dashboard scrapes the worker's /metrics.
func TestDashboardShowsTheWorkersTaskStarts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	mustRun(t, append(base, "quota", "set", "acme", "--limit", "10", "--window", "1m")...)
	_, werr := runUntilCancelled(t, nil, append(base, "worker", "--metrics-addr", "127.0.0.1:0")...)
	metricsURL := waitForMatch(t, werr, regexp.MustCompile(`metrics=(http://127\.0\.0\.1:\d+/metrics)`), "the worker's metrics address")
	const token = "a-token-never-printed"
	dout, derr := runUntilCancelled(t, map[string]string{"ADMITQ_DASHBOARD_TOKEN": token},
		append(base, "dashboard", "--addr", "127.0.0.1:0", "--metrics", metricsURL)...)
	url := waitForMatch(t, dout, regexp.MustCompile(`admitq dashboard at (http://127\.0\.0\.1:\d+/) on Redis at`), "the dashboard's address")

	get := func() map[string]any {
		req, _ := http.NewRequest(http.MethodGet, url+"api/tenants", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	// Wait for the dashboard's first sample of the worker's metrics.
	waitFor(t, 20*time.Second, "a first sample", func() bool {
		times, _ := get()["rates"].(map[string]any)["times"].([]any)
		return len(times) > 0
	})
	for range 3 {
		mustRun(t, append(base, "enqueue", "--tenant", "acme", "--type", "job")...)
	}
	waitFor(t, 20*time.Second, "3 task starts of acme in the dashboard's rates", func() bool {
		v := get()
		rows, _ := v["rows"].([]any)
		if len(rows) != 1 || rows[0].(map[string]any)["in_window"] != 3.0 {
			return false
		}
		started, _ := v["rates"].(map[string]any)["series"].(map[string]any)["acme"].(map[string]any)["started"].([]any)
		sum := 0.0
		for _, s := range started {
			sum += s.(float64) * 2 // per second over 2s intervals
		}
		return sum > 2.9 && sum < 3.1
	})
	if strings.Contains(dout.String()+derr.String(), token) {
		t.Error("the dashboard printed its token")
	}
}

func TestDemoServesTheDashboardWhileItRuns(t *testing.T) {
	t.Parallel()
	out, _ := runUntilCancelled(t, nil, "demo", "--duration", "4s", "--dashboard", "--dashboard-addr", "127.0.0.1:0")
	url := waitForMatch(t, out, regexp.MustCompile(`(?m)^dashboard at (http://127\.0\.0\.1:\d+/)$`), "the demo's dashboard URL")
	var names []string
	waitFor(t, 10*time.Second, "the demo's tenants on the dashboard", func() bool {
		resp, err := http.Get(url + "api/tenants")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var v struct {
			Rows []struct{ Tenant string } `json:"rows"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&v)
		names = names[:0]
		for _, r := range v.Rows {
			names = append(names, r.Tenant)
		}
		return strings.Join(names, ",") == "noisy,small,steady"
	})
}

// TestTheDashboardLetsSlowAndIdleConnectionsGo: without Read, Write and
// Idle timeouts a client holds a connection (and its goroutine) for ever.
func TestTheDashboardLetsSlowAndIdleConnectionsGo(t *testing.T) {
	srv := dashboardServer(http.NotFoundHandler())
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout,
	} {
		if d <= 0 || d > 5*time.Minute {
			t.Errorf("%s is %v, want between 0 and 5m", name, d)
		}
	}
	if srv.MaxHeaderBytes == 0 || srv.MaxHeaderBytes > 1<<20 {
		t.Errorf("MaxHeaderBytes is %d", srv.MaxHeaderBytes)
	}
}

func TestDashboardHasATrustProxyFlag(t *testing.T) {
	r := admitq(t, "dashboard", "--help")
	if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "--trust-proxy") || !strings.Contains(r.stdout+r.stderr, "X-Forwarded-Proto") {
		t.Errorf("dashboard --help:\n%v", r)
	}
}
