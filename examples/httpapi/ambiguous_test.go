package main

import (
	"context"
	"log/slog"
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

// errorReply is a Redis error reply, as go-redis returns one (it matches
// redis.Error).
type errorReply string

func (e errorReply) Error() string { return string(e) }

// RedisError marks errorReply as a reply, not a connection failure.
func (errorReply) RedisError() {}

// replyHook answers asynq's first write of the task key it watches with a
// Redis error reply. When landed, the write reaches Redis first, as when
// its reply was lost and go-redis's retry of it got the error; otherwise
// the write is not sent.
type replyHook struct {
	key    string
	reply  errorReply
	landed bool
	fired  atomic.Bool // the test sends one request at a time
}

func (h *replyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook sees asynq's EVAL, sent when Redis lacks its script.
func (h *replyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.watches(cmd) || h.fired.Load() {
			return next(ctx, cmd)
		}
		if h.landed {
			if err := next(ctx, cmd); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				return err
			}
		}
		h.fired.Store(true)
		cmd.SetErr(h.reply)
		return h.reply
	}
}

// ProcessPipelineHook sees asynq's EVALSHA, which enqueue.NewFromRedis
// sends in pipelines.
func (h *replyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		i := slices.IndexFunc(cmds, h.watches)
		if i < 0 || h.fired.Load() {
			return next(ctx, cmds)
		}
		send := cmds
		if !h.landed {
			send = slices.Delete(slices.Clone(cmds), i, i+1)
		}
		var err error
		if len(send) > 0 {
			err = next(ctx, send)
		}
		if cmd := cmds[i]; cmd.Err() != nil && strings.HasPrefix(cmd.Err().Error(), "NOSCRIPT") {
			return err // nothing ran: go-redis falls back to EVAL
		}
		h.fired.Store(true)
		cmds[i].SetErr(h.reply)
		return h.reply
	}
}

// watches reports whether cmd is a script call naming h's key.
func (h *replyHook) watches(cmd redis.Cmder) bool {
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return false
	}
	return slices.ContainsFunc(cmd.Args(), func(a any) bool { s, _ := a.(string); return s == h.key })
}

// An enqueue that fails after admission in a way that may have written the
// job (enqueue.IsAmbiguous: here a Redis error reply to asynq's write) is
// answered 503 with a Retry-After, telling the client that the job may have
// been accepted and that only a retry with the same Idempotency-Key is
// safe. Such a retry, whether or not the write had landed, gets 202 with
// the one job, in the slot it was first given, and takes no second slot.
func TestAmbiguousEnqueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc   string
		reply  errorReply
		landed bool
		// says is what the 503's error says
		says []string
	}{
		{desc: "OOM, nothing written", reply: "OOM command not allowed when used memory > 'maxmemory'.",
			says: []string{"not accepted", "try again"}},
		{desc: "LOADING to a retry of a write that ran", reply: "LOADING Redis is loading the dataset in memory", landed: true,
			says: []string{"may have been accepted", "same Idempotency-Key", "twice"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			q := admission.Quota{Limit: 2, Window: time.Minute, MaxDelay: time.Minute}
			gate := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithTimeout(5*time.Second))
			t.Cleanup(func() { _ = gate.Close() })
			// asynq writes on a client of their own, as run's do on rdb,
			// so that the hook sees them and not the gate's scripts.
			writes := srv.Client(t)
			id := jobID("acme", "order-9")
			hook := &replyHook{key: "asynq:{" + queue + "}:t:" + id, reply: tc.reply, landed: tc.landed}
			writes.AddHook(hook)
			log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
			inspector := asynq.NewInspectorFromRedisClient(rdb)
			hs := httptest.NewServer(newHandler(enqueue.NewFromRedis(writes, gate), inspector, log))
			t.Cleanup(hs.Close)
			url := hs.URL + "/tenants/acme/jobs"
			body := `{"type":"t","payload":{"n":9}}`

			first := post(t, url, body, "Idempotency-Key", "order-9")
			if !hook.fired.Load() {
				t.Fatalf("the hook never answered asynq's write; first: %d %v", first.status, first.body)
			}
			msg, _ := first.body["error"].(string)
			if first.status != http.StatusServiceUnavailable || first.retryAfter != "1" || first.body["retry_after"] != 1.0 {
				t.Errorf("first: %d, Retry-After %q, %v; want 503 with Retry-After 1", first.status, first.retryAfter, first.body)
			}
			for _, want := range tc.says {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not say %q", msg, want)
				}
			}
			if _, err := inspector.GetTaskInfo(queue, id); (err == nil) != tc.landed {
				t.Errorf("after the failure, looking the job up: %v; want it queued: %v", err, tc.landed)
			}

			retry := post(t, url, body, "Idempotency-Key", "order-9")
			if retry.status != http.StatusAccepted || retry.body["id"] != id || retry.body["state"] != "admitted" {
				t.Fatalf("retry: %d %v, want 202 admitting job %q", retry.status, retry.body, id)
			}
			// The retry took no second slot: with a limit of 2, one more
			// job is admitted now.
			if next := post(t, url, `{"type":"t"}`); next.body["state"] != "admitted" {
				t.Errorf("next job: %d %v, want admitted", next.status, next.body)
			}
			qi, err := inspector.GetQueueInfo(queue)
			if err != nil {
				t.Fatal(err)
			}
			if qi.Pending != 2 {
				t.Errorf("queue holds %d pending jobs, want 2", qi.Pending)
			}
		})
	}
}
