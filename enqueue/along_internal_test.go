package enqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// fairQueue starts a redis-server with a fair worker of concurrency 1 on
// queue q, and returns a Client made by NewFromRedis on it, with its gate
// and its Redis.
func fairQueue(t *testing.T) (*Client, *admission.Gate, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	g := admission.New(rdb, admission.StaticQuotas{Default: &admission.Quota{Limit: 1000, Window: time.Second}})
	t.Cleanup(func() { _ = g.Close() })
	s, err := dispatch.New(rdb, g, nil).Serve(dispatch.Worker{Queues: []string{"q"}, Concurrency: 1, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return NewFromRedis(rdb, g), g, rdb
}

// scheduleMessage takes the message from asynq's schedule script call of
// the parked task, and from nothing else.
func TestScheduleMessageKnowsAsynqsScheduleCall(t *testing.T) {
	keys := []string{"asynq:{q}:t:id", "asynq:{q}:scheduled"}
	args := []any{[]byte("msg"), ParkedUntil.Unix(), "id"}
	if m, ok := scheduleMessage("q", "id", keys, args); !ok || string(m) != "msg" {
		t.Fatalf("asynq's call: %q, %v", m, ok)
	}
	if m, ok := scheduleMessage("q", "id", keys, []any{"msg", ParkedUntil.Unix(), "id"}); !ok || string(m) != "msg" {
		t.Fatalf("a string message: %q, %v", m, ok)
	}
	for _, c := range []struct {
		desc string
		keys []string
		args []any
	}{
		{"another task", []string{"asynq:{q}:t:other", "asynq:{q}:scheduled"}, args},
		{"another queue", []string{"asynq:{r}:t:id", "asynq:{r}:scheduled"}, args},
		{"asynq's enqueue, into pending", []string{"asynq:{q}:t:id", "asynq:{q}:pending"}, args},
		{"its unique schedule", append([]string{"asynq:{q}:unique:x"}, keys...), []any{"id", 3600, ParkedUntil.Unix(), []byte("msg")}},
		{"another time", keys, []any{[]byte("msg"), ParkedUntil.Unix() - 1, "id"}},
		{"another ID", keys, []any{[]byte("msg"), ParkedUntil.Unix(), "other"}},
		{"no message", keys, []any{42, ParkedUntil.Unix(), "id"}},
		{"more arguments", keys, append(args, "more")},
	} {
		if _, ok := scheduleMessage("q", "id", c.keys, c.args); ok {
			t.Errorf("%s: taken for the parked task's write", c.desc)
		}
	}
}

// A write that is not the one the park expects is refused before anything
// is sent, and the Client parks and writes in two calls from then on.
func TestAnUnknownWriteParksInTwoCalls(t *testing.T) {
	ctx := context.Background()
	c, _, rdb := fairQueue(t)
	a := &along{c: c, task: dispatch.Task{Queue: "q", Tenant: "t", ID: "id"}}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	cmd := a.write(ctx, []string{"asynq:{q}:t:id", "asynq:{q}:pending"}, []any{[]byte("msg"), "id", 1})
	if !errors.Is(cmd.Err(), errNotSchedule) || !c.twoCalls.Load() {
		t.Fatalf("an unknown write: %v, two calls from now on %v", cmd.Err(), c.twoCalls.Load())
	}
	if stats := rdb.Info(ctx, "commandstats").Val(); strings.Contains(stats, "cmdstat_fcall") || strings.Contains(stats, "cmdstat_eval") {
		t.Fatalf("an unknown write sent a script call:\n%s", stats)
	}
	parked := 0
	for i := range 4 {
		info, d, err := c.Enqueue(ctx, "t", asynq.NewTask("job", nil), asynq.Queue("q"), asynq.TaskID(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome == admission.Parked && (info.State != asynq.TaskStateScheduled || !info.NextProcessAt.Equal(ParkedUntil)) {
			t.Fatalf("a parked task: %v at %v", info.State, info.NextProcessAt)
		}
		if d.Outcome == admission.Parked {
			parked++
		}
	}
	if parked == 0 {
		t.Fatal("no task waits")
	}
}

// A park that goes straight in writes nothing, and leaves the call's
// trace as it found it: the write after it is traced on its own, so that
// one that is never sent reads as unwritten.
func TestAParkThatWritesNothingLeavesNoTrace(t *testing.T) {
	ctx := context.Background()
	c, g, _ := fairQueue(t)
	p, err := c.prepare("t", asynq.NewTask("job", nil), []asynq.Option{asynq.Queue("q")})
	if err != nil {
		t.Fatal(err)
	}
	cc := callFor(ctx, p)
	q, err := g.Quota(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	tk, tried, err := c.parkWriting(cc, p, dispatch.Task{Queue: "q", Tenant: "t", ID: p.id}, q)
	if err != nil || !tried || tk.Verdict != dispatch.Straight {
		t.Fatalf("the first task: %+v, tried %v, %v; want it straight in", tk, tried, err)
	}
	if cc.along != nil || cc.trace.sent.Load() || cc.trace.oom.Load() {
		t.Errorf("a park that wrote nothing left its trace: along %v, sent %v", cc.along != nil, cc.trace.sent.Load())
	}
}

// The park sent as a script (Redis without functions) is traced only when
// it writes its task; asynq's scripts always are.
func TestAParkScriptIsTracedWhenItWrites(t *testing.T) {
	p := newPipelined(nil)
	park, asynqs := lua.FairPark().Plain.Hash(), "8ce6b38a99b73194585c251eb3c2a89559f37a87"
	alone := &callContext{Context: context.Background()}
	writing := &callContext{Context: context.Background(), along: &along{ran: true}}
	if p.traces(alone, park, "") || !p.traces(writing, park, "") || !p.traces(alone, asynqs, "") || !p.traces(writing, asynqs, "") {
		t.Errorf("traced: a park alone %v, writing %v; asynq's %v, %v", p.traces(alone, park, ""), p.traces(writing, park, ""), p.traces(alone, asynqs, ""), p.traces(writing, asynqs, ""))
	}
	fn := lua.FairPark().Function
	if p.traces(alone, "", fn) || !p.traces(writing, "", fn) {
		t.Errorf("traced: the park's function alone %v, writing %v", p.traces(alone, "", fn), p.traces(writing, "", fn))
	}
}

// asynq's ID conflict on an ID this call made finds the task its own first
// attempt wrote (go-redis resent it): enqueued. On a caller's ID, or with
// the task gone, it stays ambiguous.
func TestAConflictOnAMadeIDIsTheCallsOwnWrite(t *testing.T) {
	ctx := context.Background()
	c, _, rdb := fairQueue(t)
	ac := asynq.NewClientFromRedisClient(rdb)
	defer ac.Close()
	for _, tc := range []struct {
		desc              string
		made, there, over bool // over: the call's context ended
		want              fate
	}{
		{"a made ID, its task there", true, true, false, written},
		{"a made ID, its task gone", true, false, false, maybe},
		{"the caller's ID, a task there", false, true, false, maybe},
		{"a made ID, its task there, the call's context over", true, true, true, maybe},
	} {
		p, err := c.prepare("t", asynq.NewTask("job", []byte(tc.desc)), []asynq.Option{asynq.Queue("q")})
		if err != nil {
			t.Fatal(err)
		}
		p.made = tc.made
		if tc.there {
			if _, err := ac.Enqueue(asynq.NewTask("job", []byte(tc.desc)), asynq.Queue("q"), asynq.TaskID(p.id)); err != nil {
				t.Fatal(err)
			}
		}
		cctx, cancel := context.WithCancel(ctx)
		if tc.over {
			cancel()
		}
		cc := callFor(cctx, p)
		cc.trace.sent.Store(true)
		info, f, err := c.wrote(cc, p, admission.Decision{}, nil, fmt.Errorf("asynq: %w", asynq.ErrTaskIDConflict))
		if f != tc.want || (f == written) != (err == nil && info != nil && string(info.Payload) == tc.desc) {
			t.Errorf("%s: %v (%v, info %v), want %v", tc.desc, f, err, info != nil, tc.want)
		}
		if tc.over && !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v, want the context's cause", tc.desc, err)
		}
		cancel()
	}
}
