package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// The quota the README's curl loop runs with (-limit 2 -window 10s
// -max-delay 25s) shows all three outcomes in eight quick requests.
func TestReadmeQuotaShowsEveryOutcome(t *testing.T) {
	t.Parallel()
	base, _ := newTestServer(t, admission.Quota{Limit: 2, Window: 10 * time.Second, MaxDelay: 25 * time.Second})
	var got []string
	for range 8 {
		a := post(t, base+"/tenants/acme/jobs", `{"type":"email:send"}`)
		if a.status == http.StatusTooManyRequests {
			got = append(got, "429")
			continue
		}
		got = append(got, a.body["state"].(string))
	}
	want := []string{"admitted", "admitted", "deferred", "deferred", "deferred", "deferred", "429", "429"}
	if !slices.Equal(got, want) {
		t.Errorf("eight requests got %v, want %v", got, want)
	}
}

// POST /tenants//jobs is a bad request, not a redirect to /tenants/jobs.
func TestEmptyTenantInThePathIsABadRequest(t *testing.T) {
	t.Parallel()
	hs := httptest.NewServer(newHandler(nil, nil, slog.New(slog.DiscardHandler)))
	defer hs.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/tenants//jobs", "/tenants/./jobs", "/tenants/acme/../jobs"} {
		resp, err := noRedirect.Post(hs.URL+path, "application/json", strings.NewReader(`{"type":"t"}`))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"error"`) {
			t.Errorf("POST %s: %d %s, want 400 with an error", path, resp.StatusCode, body)
		}
	}
}

// The server bounds how long a client may take to send a request and how
// long an idle connection is kept, not only the headers.
func TestServerTimeouts(t *testing.T) {
	srv := newServer(":0", http.NotFoundHandler())
	for _, c := range []struct {
		name string
		got  time.Duration
		max  time.Duration
	}{
		{"ReadHeaderTimeout", srv.ReadHeaderTimeout, 10 * time.Second},
		{"ReadTimeout", srv.ReadTimeout, 20 * time.Second},
		{"WriteTimeout", srv.WriteTimeout, 30 * time.Second},
		{"IdleTimeout", srv.IdleTimeout, 20 * time.Second},
	} {
		if c.got <= 0 || c.got > c.max {
			t.Errorf("%s = %v, want more than 0 and at most %v", c.name, c.got, c.max)
		}
	}
	if srv.WriteTimeout <= srv.ReadTimeout-srv.ReadHeaderTimeout {
		t.Errorf("WriteTimeout %v leaves no time to answer a body read in full", srv.WriteTimeout)
	}
}

// lossHook runs before, once, just ahead of the first asynq write of the
// task key it watches: the moment where another request's write can land
// first.
type lossHook struct {
	key    string
	fired  atomic.Bool // not a sync.Once: before's own write comes through here too
	before func()
}

func (h *lossHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lossHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if slices.ContainsFunc(cmd.Args(), func(a any) bool { s, _ := a.(string); return s == h.key }) {
			if h.fired.CompareAndSwap(false, true) {
				h.before()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *lossHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The original request, whose own retry (same Idempotency-Key, sent while
// the original was still running) wrote the job first, holds the job's slot
// as much as the retry does: both get 202 with the same job, not 409.
func TestOriginalRequestThatLosesTheWriteToItsRetry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	q := admission.Quota{Limit: 5, Window: time.Minute}
	gate := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithTimeout(5*time.Second))
	t.Cleanup(func() { _ = gate.Close() })
	asynqRDB := redis.NewClient(srv.Options())
	t.Cleanup(func() { asynqRDB.Close() })
	id := jobID("acme", "order-7")
	hook := &lossHook{key: "asynq:{" + queue + "}:t:" + id}
	asynqRDB.AddHook(hook)
	client := enqueue.New(asynq.NewClientFromRedisClient(asynqRDB), gate)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	hs := httptest.NewServer(newHandler(client, asynq.NewInspectorFromRedisClient(rdb), log))
	t.Cleanup(hs.Close)
	url := hs.URL + "/tenants/acme/jobs"

	var retry answer
	hook.before = func() { retry = post(t, url, `{"type":"t","payload":{"n":7}}`, "Idempotency-Key", "order-7") }
	original := post(t, url, `{"type":"t","payload":{"n":7}}`, "Idempotency-Key", "order-7")
	if retry.status != http.StatusAccepted || retry.body["id"] != id {
		t.Fatalf("retry: %d %v, want 202 with job %q (the hook did not run?)", retry.status, retry.body, id)
	}
	if original.status != http.StatusAccepted || original.body["id"] != id || original.body["run_at"] != retry.body["run_at"] {
		t.Errorf("original: %d %v, want 202 with the retry's job and slot %v", original.status, original.body, retry.body)
	}
}

// An Idempotency-Key sent again with another job is refused with 422; with
// the same job, spaced differently, it is a retry.
func TestIdempotencyKeyReusedForAnotherJob(t *testing.T) {
	t.Parallel()
	base, inspector := newTestServer(t, admission.Quota{Limit: 5, Window: time.Minute})
	url := base + "/tenants/acme/jobs"
	if a := post(t, url, `{"type":"t","payload":{"n":1}}`, "Idempotency-Key", "k"); a.status != http.StatusAccepted {
		t.Fatalf("first: %d %v", a.status, a.body)
	}
	if a := post(t, url, `{"type": "t", "payload": { "n": 1 }}`, "Idempotency-Key", "k"); a.status != http.StatusAccepted {
		t.Errorf("the same job spaced differently: %d %v, want 202", a.status, a.body)
	}
	for _, body := range []string{`{"type":"t","payload":{"n":2}}`, `{"type":"u","payload":{"n":1}}`, `{"type":"t"}`} {
		a := post(t, url, body, "Idempotency-Key", "k")
		msg, _ := a.body["error"].(string)
		if a.status != http.StatusUnprocessableEntity || !strings.Contains(msg, "Idempotency-Key") {
			t.Errorf("key reused with %s: %d %v, want 422 naming the Idempotency-Key", body, a.status, a.body)
		}
	}
	qi, err := inspector.GetQueueInfo(queue)
	if err != nil {
		t.Fatal(err)
	}
	if qi.Pending != 1 {
		t.Errorf("queue holds %d jobs, want 1", qi.Pending)
	}
}

// The API checks Redis before it listens: a wrong address ends run at once,
// naming the cause.
func TestRunChecksRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := config{redis: addr, addr: "127.0.0.1:0", quota: admission.Quota{Limit: 1, Window: time.Second}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = run(ctx, cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "cannot reach Redis at "+addr) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("run = %v, want an error naming %s and the refused connection", err, addr)
	}
	if ctx.Err() != nil {
		t.Error("run served instead of stopping")
	}
}
