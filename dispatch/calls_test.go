package dispatch_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/lua"
)

// scriptCounter counts the calls of some scripts, by SHA1 or function
// name, through a client's hooks (pipelined or not).
type scriptCounter struct {
	shas map[string]bool
	n    atomic.Int64
}

func (c *scriptCounter) count(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) > 1 && (cmd.Name() == "evalsha" || cmd.Name() == "eval" || cmd.Name() == "fcall") {
		if sha, ok := args[1].(string); ok && c.shas[sha] {
			c.n.Add(1)
		}
	}
}

func (c *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.count(cmd); return next(ctx, cmd) }
}
func (c *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// The workers' dispatch costs at most one script call per waiting task:
// a turn hands in finishes and moves the last turn's grants in one call.
func TestDispatchCostsAScriptCallPerTaskAtMost(t *testing.T) {
	s := newStack(t, generous)
	hold, err := dispatch.New(s.rdb, s.gate, nil).Serve(dispatch.Worker{Queues: []string{"default"}, Concurrency: 8, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := s.backlog(200, map[string]time.Duration{"a": 5 * time.Millisecond, "b": 5 * time.Millisecond})
	waiting := 0
	for _, tn := range []string{"a", "b"} {
		waiting += int(s.rdb.LLen(context.Background(), "admitq:fair:{default}:w:"+tn).Val())
	}
	c := &scriptCounter{shas: map[string]bool{}}
	for _, fs := range []lua.FairScript{lua.FairDispatch(), lua.FairMove(), lua.FairRepair()} {
		c.shas[fs.Flagged.Hash()], c.shas[fs.Plain.Hash()], c.shas[fs.Function] = true, true, true
	}
	workers := s.srv.Client(t)
	workers.AddHook(c)
	s.startWorkerOn(workers, 8, true)
	hold.Close()
	s.waitRuns(ids, 60*time.Second)
	if c.n.Load() == 0 {
		t.Fatal("no dispatcher script call counted")
	}
	per := float64(c.n.Load()) / float64(waiting)
	t.Logf("%d waiting tasks went in with %d dispatcher script calls (%.2f a task)", waiting, c.n.Load(), per)
	if per > 1 {
		t.Errorf("%.2f dispatcher script calls per waiting task; want at most 1", per)
	}
}

// A task whose ID Enqueue makes is written only after its park answers,
// so the park does not look for the ID among the parked tasks (HGET of the
// task's state); a task with the caller's own ID is looked for, so that a
// retry after its write adds nothing. The worker leaves at once: its
// record holds the queue dispatched for its restart grace, and no loop of
// its reads tasks meanwhile.
func TestAParkLooksAmongTheParkedOnlyForTheCallersIDs(t *testing.T) {
	s := newStack(t, generous)
	hold, err := dispatch.New(s.rdb, s.gate, nil).Serve(dispatch.Worker{Queues: []string{"default"}, Concurrency: 1, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	hold.Close()
	ctx := context.Background()
	for _, own := range []bool{false, true} {
		before := commandCalls(t, s, "hget")
		for i := range 10 {
			var opts []asynq.Option
			if own {
				opts = append(opts, asynq.TaskID(fmt.Sprintf("own-%d", i)))
			}
			if _, d, err := s.client.Enqueue(ctx, "a", asynq.NewTask("work", []byte("1ms")), opts...); err != nil || d.Outcome == admission.Rejected {
				t.Fatalf("own IDs %v, task %d: %v, %v", own, i, d.Outcome, err)
			}
		}
		looks := commandCalls(t, s, "hget") - before
		switch {
		case !own && looks != 0:
			t.Errorf("ten parks of IDs Enqueue made: %d HGET calls, want none", looks)
		case own && looks < 10:
			t.Errorf("ten parks of the caller's IDs: %d HGET calls, want one each at least", looks)
		}
	}
}
