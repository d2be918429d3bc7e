package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
)

// failDone fails the first of asynq's calls that marks task id done, as a
// connection broken under it would, without sending it.
type failDone struct {
	id     string
	failed atomic.Bool
}

func (h *failDone) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failDone) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if cmd.Name() == "evalsha" && len(args) > 5 && strings.HasSuffix(args[3].(string), "}:active") &&
			strings.HasSuffix(args[5].(string), ":t:"+h.id) && h.failed.CompareAndSwap(false, true) {
			err := errors.New("read tcp: connection reset by peer")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *failDone) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAFailedDoneIsRetriedOnAFreshContext: asynq's call that marks a task
// done fails (Redis went away for a moment). asynq retries it 5 s later,
// on the context of the first attempt, which it has cancelled by then;
// the worker runs the retry on the task's lease instead, so the task is
// done (not run a second time once its lease lapses) and its capped
// tenant's next task starts within seconds, not minutes.
func TestAFailedDoneIsRetriedOnAFreshContext(t *testing.T) {
	s := newKeyStack(t)
	h := &failDone{id: "first"}
	s.rdb.AddHook(h)
	s.setTenant("capped", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
	s.startWorker(2)
	s.put("capped", "first", "1ms")
	s.put("capped", "second", "1ms")
	s.waitRuns([]string{"first", "second"}, 15*time.Second)
	if !h.failed.Load() {
		t.Fatal("no call marking the first task done was failed")
	}
	ctx := context.Background()
	poll(t, "asynq to hold no active task", func() bool {
		n, err := s.rdb.LLen(ctx, "asynq:{default}:active").Result()
		return err == nil && n == 0
	})
	if n := s.ran("first"); n != 1 {
		t.Errorf("the first task ran %d times, want once", n)
	}
}
