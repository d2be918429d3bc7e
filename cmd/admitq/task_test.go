package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// taskOf runs task --json with args and decodes it.
func taskOf(t *testing.T, base []string, args ...string) []taskReport {
	t.Helper()
	out := mustRun(t, append(append(append([]string{}, base...), "task", "--json"), args...)...).stdout
	var rs []taskReport
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("task --json %v does not parse: %v\n%s", args, err, out)
	}
	return rs
}

// TestTaskSaysWhereATaskIsAndWhy: task finds a task's queue, shows asynq's
// state, and for a capped tenant's tasks what the dispatcher holds: the one
// in flight, the ones waiting in line behind the cap, at their places;
// enqueue names the cap when it parks; an unknown task exits 4.
func TestTaskSaysWhereATaskIsAndWhy(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	mustRun(t, append(base, "quota", "set", "noisy", "--limit", "100", "--window", "1s", "--max-in-flight", "1")...)
	serveQueue(t, srv)
	mustRun(t, append(base, "enqueue", "--tenant", "noisy", "--type", "x", "--id", "a")...)
	for _, id := range []string{"b", "c"} {
		out := mustRun(t, append(base, "enqueue", "--tenant", "noisy", "--type", "x", "--id", id)...).stdout
		want := "parked: task " + id + " in queue default; the tenant is at its cap (1/1 in flight)"
		if !strings.HasPrefix(out, want) {
			t.Errorf("enqueue %s printed %q, want it to start %q", id, out, want)
		}
	}
	ac := asynq.NewClientFromRedisClient(srv.Client(t))
	if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.Queue("plain"), asynq.TaskID("p")); err != nil {
		t.Fatal(err)
	}

	text := mustRun(t, append(base, "task", "c")...).stdout
	for _, want := range []string{
		"task c in queue default",
		"asynq:      scheduled, parked for the dispatcher until its turn",
		"tenant:     noisy",
		"dispatcher: waiting, 2nd of 2 in the tenant's line",
		"waits on:   the tenant is at its cap (1/1 in flight): it goes in when one of the tenant's running tasks ends",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("task c lacks %q:\n%s", want, text)
		}
	}

	rs := taskOf(t, base, "b")
	if len(rs) != 1 || rs[0].Queue != "default" || rs[0].State != "scheduled" || rs[0].Tenant != "noisy" || rs[0].MaxInFlight != 1 || rs[0].Dispatch == nil {
		t.Fatalf("task b = %+v, want scheduled in default, noisy's, held by the dispatcher", rs)
	}
	if d := rs[0].Dispatch; d.Where != "waiting" || d.Reason != "cap" || d.Position != 1 || d.TenantWaiting != 2 || d.InFlight != 1 || d.Cap != 1 {
		t.Errorf("task b's dispatch = %+v, want waiting 1st of 2, at the cap 1/1", d)
	}
	rs = taskOf(t, base, "a", "--queue", "default")
	if len(rs) != 1 || rs[0].State != "pending" || rs[0].Dispatch == nil || rs[0].Dispatch.Where != "in flight" || rs[0].Dispatch.Stage != "queued" {
		t.Errorf("task a = %+v, want pending, in flight", rs)
	}
	if text := mustRun(t, append(base, "task", "a")...).stdout; !strings.Contains(text, "in flight (queued), counted against the tenant's cap: 1/1 (at cap)") {
		t.Errorf("task a:\n%s", text)
	}
	if text := mustRun(t, append(base, "task", "p")...).stdout; !strings.Contains(text, "task p in queue plain") || !strings.Contains(text, "asynq:      pending") ||
		!strings.Contains(text, "dispatcher: holds nothing of it") {
		t.Errorf("task p, a plain asynq task:\n%s", text)
	}

	// A task parked in asynq that the dispatcher holds no entry for is
	// named as such: nothing will move it in.
	if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID("orphan"), asynq.ProcessAt(dispatch.ParkedUntil)); err != nil {
		t.Fatal(err)
	}
	if text := mustRun(t, append(base, "task", "orphan")...).stdout; !strings.Contains(text, "scheduled, parked for the dispatcher") ||
		!strings.Contains(text, "holds no entry for it") {
		t.Errorf("task orphan:\n%s", text)
	}

	// A task for later waits aside in limbo; deleted from asynq, it is
	// found there still, by the dispatcher's entry.
	rdb := srv.Client(t)
	g := admission.New(rdb, admission.NewRedisQuotas(rdb))
	t.Cleanup(func() { g.Close() })
	if _, d, err := enqueue.NewFromRedis(rdb, g).Enqueue(t.Context(), "noisy", asynq.NewTask("x", nil), asynq.TaskID("later"), asynq.ProcessIn(time.Hour)); err != nil || d.Outcome != admission.Parked {
		t.Fatalf("enqueue later: %v, %v; want parked", d.Outcome, err)
	}
	if text := mustRun(t, append(base, "task", "later")...).stdout; !strings.Contains(text, "dispatcher: limbo") || !strings.Contains(text, "waits aside until its own start time") {
		t.Errorf("task later:\n%s", text)
	}
	if err := asynq.NewInspectorFromRedisClient(rdb).DeleteTask("default", "later"); err != nil {
		t.Fatal(err)
	}
	text = mustRun(t, append(base, "task", "later")...).stdout
	if !strings.Contains(text, "asynq:      does not hold it") || !strings.Contains(text, "in limbo: asynq does not hold the task") {
		t.Errorf("task later, deleted from asynq:\n%s", text)
	}

	for _, c := range []struct {
		desc string
		args []string
		code int
		want string
	}{
		{"no such task", []string{"task", "nope"}, exitNotFound, `task "nope": not found in any queue`},
		{"not in the queue named", []string{"task", "a", "--queue", "plain"}, exitNotFound, `not found in queue "plain"`},
		{"no task ID", []string{"task"}, exitUsage, "want one TASKID"},
		{"an empty task ID", []string{"task", ""}, exitUsage, "TASKID is empty"},
		{"an empty queue", []string{"task", "a", "--queue", ""}, exitUsage, "--queue is empty"},
	} {
		if res := admitq(t, append(base, c.args...)...); res.code != c.code || !strings.Contains(res.stderr, c.want) {
			t.Errorf("%s: %v\nwant exit %d and %q", c.desc, res, c.code, c.want)
		}
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 102: "102nd", 111: "111th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}

// TestTaskNamesItsFlowAndKey: a task waiting on a paused key says its
// flow (priority and keys), its place there and the key that holds it.
func TestTaskNamesItsFlowAndKey(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	mustRun(t, append(base, "quota", "set", "acme", "--limit", "none", "--max-in-flight", "5")...)
	mustRun(t, append(base, "key", "pause", "api:x")...)
	serveQueue(t, srv)
	for _, id := range []string{"k1", "k2"} {
		mustRun(t, append(base, "enqueue", "--tenant", "acme", "--type", "x", "--id", id, "--key", "api:x", "--priority", "2")...)
	}
	text := mustRun(t, append(base, "task", "k2")...).stdout
	for _, want := range []string{
		"dispatcher: waiting, 2nd of 2 in its flow (priority 2, keys api:x), 0 flows ahead; 2 of the tenant's tasks wait",
		"api:x",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("task k2 lacks %q:\n%s", want, text)
		}
	}
	rs := taskOf(t, base, "k1")
	if len(rs) != 1 || rs[0].Dispatch == nil {
		t.Fatalf("task k1 = %+v", rs)
	}
	if d := rs[0].Dispatch; d.Position != 1 || d.FlowWaiting != 2 || d.Priority != 2 || d.Key != "api:x" || len(d.Keys) != 1 || d.Keys[0] != "api:x" {
		t.Errorf("task k1's dispatch = %+v, want 1st of 2 in its flow, priority 2, held by api:x", d)
	}
}
