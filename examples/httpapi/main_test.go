package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// newTestServer serves newHandler on a Redis of the test's own, with the
// default quota q. It returns the server's URL and an inspector of the
// queue.
func newTestServer(t *testing.T, q admission.Quota) (string, *asynq.Inspector) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	// A generous deadline: tests share two CPUs under -race.
	gate := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithTimeout(5*time.Second))
	t.Cleanup(func() { _ = gate.Close() })
	client := enqueue.New(asynq.NewClientFromRedisClient(rdb), gate)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	hs := httptest.NewServer(newHandler(client, asynq.NewInspectorFromRedisClient(rdb), log))
	t.Cleanup(hs.Close)
	return hs.URL, asynq.NewInspectorFromRedisClient(rdb)
}

type answer struct {
	status     int
	retryAfter string // the header
	body       map[string]any
}

func post(t *testing.T, url, body string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("POST %s: Content-Type %q, want application/json; body %s", url, ct, raw)
	}
	if err := json.Unmarshal(raw, &a.body); err != nil {
		t.Fatalf("POST %s: body %q is not a JSON object: %v", url, raw, err)
	}
	return a
}

func parseTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, _ := v.(string)
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("time %v: %v", v, err)
	}
	return ts
}

// TestAcceptThenTooManyRequests walks one tenant past its quota: admitted,
// deferred, then refused with a Retry-After that is right: the request is
// refused until then and accepted after.
func TestAcceptThenTooManyRequests(t *testing.T) {
	t.Parallel()
	// One job in any 2s, deferrable by 3s. The first job is admitted, the
	// second deferred to the next whole second 2s on, and the third's slot,
	// 2s after that, lies more than 3s ahead: refused until that slot - 3s.
	q := admission.Quota{Limit: 1, Window: 2 * time.Second, MaxDelay: 3 * time.Second}
	base, inspector := newTestServer(t, q)
	url := base + "/tenants/acme/jobs"
	body := `{"type":"email:send","payload":{"to":"ann@example.com"}}`

	first := post(t, url, body)
	second := post(t, url, body)
	for i, a := range []answer{first, second} {
		if a.status != http.StatusAccepted {
			t.Fatalf("job %d: status %d %v, want 202", i+1, a.status, a.body)
		}
	}
	if diff := cmp.Diff([]any{"admitted", "deferred"}, []any{first.body["state"], second.body["state"]}); diff != "" {
		t.Errorf("states mismatch (-want,+got):\n%s", diff)
	}
	firstAt, secondAt := parseTime(t, first.body["run_at"]), parseTime(t, second.body["run_at"])
	if secondAt.Sub(firstAt) < q.Window || !secondAt.Equal(secondAt.Truncate(time.Second)) {
		t.Errorf("deferred run_at %v: want a whole second at least %v after the first, %v", secondAt, q.Window, firstAt)
	}
	for _, a := range []answer{first, second} {
		id, _ := a.body["id"].(string)
		ti, err := inspector.GetTaskInfo("default", id)
		if err != nil {
			t.Fatalf("job %q is not in the queue: %v", id, err)
		}
		if got := ti.Headers[enqueue.TenantHeader]; got != "acme" || string(ti.Payload) != `{"to":"ann@example.com"}` {
			t.Errorf("job %q: tenant %q, payload %s", id, got, ti.Payload)
		}
	}

	sent := time.Now()
	third := post(t, url, body)
	received := time.Now()
	if third.status != http.StatusTooManyRequests {
		t.Fatalf("job 3: status %d %v, want 429", third.status, third.body)
	}
	retryAt := parseTime(t, third.body["retry_at"])
	if want := secondAt.Add(q.Window - q.MaxDelay); !retryAt.Equal(want) {
		t.Errorf("retry_at = %v, want the next slot less MaxDelay, %v", retryAt, want)
	}
	secs, err := strconv.Atoi(third.retryAfter)
	if err != nil {
		t.Fatalf("Retry-After %q is not whole seconds: %v", third.retryAfter, err)
	}
	// Retry-After is retry_at less the decision's time, rounded up; the
	// decision was made while the request was in flight.
	lo := retryAfterSeconds(retryAt.Sub(received))
	hi := retryAfterSeconds(retryAt.Sub(sent))
	if secs < lo || secs > hi {
		t.Errorf("Retry-After = %d, want %d to %d for retry_at %v", secs, lo, hi, retryAt)
	}
	if got, _ := third.body["retry_after"].(float64); int(got) != secs {
		t.Errorf("body retry_after = %v, want the header's %d", third.body["retry_after"], secs)
	}

	// Heeding Retry-After works.
	time.Sleep(time.Until(received.Add(time.Duration(secs) * time.Second)))
	if again := post(t, url, body); again.status != http.StatusAccepted {
		t.Errorf("after Retry-After: status %d %v, want 202", again.status, again.body)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	tests := []struct {
		desc string
		in   time.Duration
		want int
	}{
		{desc: "whole seconds stay", in: 3 * time.Second, want: 3},
		{desc: "a fraction rounds up", in: 2*time.Second + time.Millisecond, want: 3},
		{desc: "under a second is one", in: time.Millisecond, want: 1},
		{desc: "zero is one, never an invitation to retry at once", in: 0, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := retryAfterSeconds(tc.in); got != tc.want {
				t.Errorf("retryAfterSeconds(%v) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	base, _ := newTestServer(t, admission.Quota{Limit: 100, Window: time.Second})
	tests := []struct {
		desc   string
		path   string
		body   string
		header []string
	}{
		{desc: "a tenant with a control character", path: "/tenants/a%01b/jobs", body: `{"type":"t"}`},
		{desc: "a tenant that is not UTF-8", path: "/tenants/%ff/jobs", body: `{"type":"t"}`},
		{desc: "a tenant over 256 bytes", path: "/tenants/" + strings.Repeat("x", 257) + "/jobs", body: `{"type":"t"}`},
		{desc: "an empty body", path: "/tenants/acme/jobs", body: ``},
		{desc: "a body that is not JSON", path: "/tenants/acme/jobs", body: `type=t`},
		{desc: "a body without a type", path: "/tenants/acme/jobs", body: `{"payload":{}}`},
		{desc: "a blank type", path: "/tenants/acme/jobs", body: `{"type":"  "}`},
		{desc: "an unknown field", path: "/tenants/acme/jobs", body: `{"type":"t","priority":1}`},
		{desc: "two JSON values", path: "/tenants/acme/jobs", body: `{"type":"t"}{"type":"u"}`},
		{desc: "a body over 1 MiB", path: "/tenants/acme/jobs", body: `{"type":"t","payload":"` + strings.Repeat("x", maxBody) + `"}`},
		{desc: "a blank Idempotency-Key", path: "/tenants/acme/jobs", body: `{"type":"t"}`, header: []string{"Idempotency-Key", " "}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			a := post(t, base+tc.path, tc.body, tc.header...)
			if a.status != http.StatusBadRequest {
				t.Errorf("status %d %v, want 400", a.status, a.body)
			}
			if msg, _ := a.body["error"].(string); msg == "" {
				t.Errorf("body %v has no error message", a.body)
			}
		})
	}
}

// TestIdempotencyKey retries a job under the same key: the same job, the
// same slot, and no second slot taken.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	base, inspector := newTestServer(t, admission.Quota{Limit: 2, Window: time.Minute, MaxDelay: time.Minute})
	url := base + "/tenants/acme/jobs"
	first := post(t, url, `{"type":"t"}`, "Idempotency-Key", "order-42")
	retry := post(t, url, `{"type":"t"}`, "Idempotency-Key", "order-42")
	if diff := cmp.Diff(first, retry, cmp.AllowUnexported(answer{})); diff != "" {
		t.Errorf("retry answered differently (-first,+retry):\n%s", diff)
	}
	if first.status != http.StatusAccepted || first.body["id"] != jobID("acme", "order-42") {
		t.Errorf("first: %d %v, want 202 with id %q", first.status, first.body, jobID("acme", "order-42"))
	}
	// Another tenant's key of the same name is another job.
	if other := post(t, base+"/tenants/globex/jobs", `{"type":"t"}`, "Idempotency-Key", "order-42"); other.status != http.StatusAccepted {
		t.Errorf("globex's order-42: %d %v, want 202", other.status, other.body)
	}
	// The retry took no slot: one more job is still admitted now.
	if other := post(t, url, `{"type":"t"}`); other.body["state"] != "admitted" {
		t.Errorf("next job: %d %v, want admitted", other.status, other.body)
	}
	qi, err := inspector.GetQueueInfo("default")
	if err != nil {
		t.Fatal(err)
	}
	if qi.Pending != 3 {
		t.Errorf("queue holds %d pending jobs, want 3", qi.Pending)
	}
}

func TestJobID(t *testing.T) {
	if a, b := jobID("a:b", "c"), jobID("a", "b:c"); a == b {
		t.Errorf("jobID(a:b, c) = jobID(a, b:c) = %q", a)
	}
}

func TestWrongMethod(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(newHandler(nil, nil, slog.New(slog.DiscardHandler)))
	defer hs.Close()
	resp, err := http.Get(hs.URL + "/tenants/acme/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", resp.StatusCode)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		desc string
		args []string
		env  map[string]string
		want config
	}{
		{
			desc: "defaults",
			want: config{redis: "127.0.0.1:6379", addr: "127.0.0.1:8090", quota: admission.Quota{Limit: 10, Window: time.Second, MaxDelay: 5 * time.Second}},
		},
		{
			desc: "the environment sets the defaults",
			env:  map[string]string{"ADMITQ_REDIS": "redis:6380", "ADMITQ_HTTP": ":9000"},
			want: config{redis: "redis:6380", addr: ":9000", quota: admission.Quota{Limit: 10, Window: time.Second, MaxDelay: 5 * time.Second}},
		},
		{
			desc: "ADMITQ_REDIS may be a URL",
			env:  map[string]string{"ADMITQ_REDIS": "rediss://u:p@redis:6380/1"},
			want: config{redis: "rediss://u:p@redis:6380/1", addr: "127.0.0.1:8090", quota: admission.Quota{Limit: 10, Window: time.Second, MaxDelay: 5 * time.Second}},
		},
		{
			desc: "flags win over the environment",
			args: []string{"-redis", "10.0.0.1:6379", "-limit", "3", "-window", "1m", "-max-delay", "0"},
			env:  map[string]string{"ADMITQ_REDIS": "redis:6380"},
			want: config{redis: "10.0.0.1:6379", addr: "127.0.0.1:8090", quota: admission.Quota{Limit: 3, Window: time.Minute}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := parseFlags(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if err != nil {
				t.Fatalf("parseFlags: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(config{})); diff != "" {
				t.Errorf("config mismatch (-want,+got):\n%s", diff)
			}
		})
	}
	if _, err := parseFlags([]string{"-limit", "0"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("parseFlags(-limit 0) succeeded, want an error")
	}
	var stderr strings.Builder
	if _, err := parseFlags(nil, func(string) string { return "a:b:c" }, &stderr); err == nil || !strings.HasPrefix(stderr.String(), "httpapi: ADMITQ_REDIS a:b:c: ") {
		t.Errorf("parseFlags with ADMITQ_REDIS=a:b:c: %v, stderr %q; want an error naming ADMITQ_REDIS", err, stderr.String())
	}
}
