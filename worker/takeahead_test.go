package worker_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/lua"
)

// takes counts the calls of take.lua that took more than one task.
type takes struct {
	sha  string
	many atomic.Int64
}

func (h *takes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *takes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); len(args) > 1 && cmd.Name() == "evalsha" && args[1] == h.sha {
			if res, ok := cmd.(*redis.Cmd).Val().([]any); ok && len(res) > 2 {
				h.many.Add(1)
			}
		}
		return err
	}
}

func (h *takes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A worker with a gate on one queue takes a task for each of its free
// slots in one look, and still runs every task once, never more at once
// than its concurrency, and leaves nothing in asynq's active list.
func TestWorkerTakesAheadAndRunsEachTaskOnce(t *testing.T) {
	s := newKeyStack(t)
	h := &takes{sha: lua.Take().Hash()}
	s.rdb.AddHook(h)
	var ids []string
	for i := range 400 {
		id := fmt.Sprintf("t%03d", i)
		s.put(fmt.Sprintf("tenant-%d", i%40), id, "1ms")
		ids = append(ids, id)
	}
	s.startWorker(8)
	s.waitRuns(ids, 30*time.Second)
	s.mu.Lock()
	peak := s.peakAll
	s.mu.Unlock()
	if peak > 8 {
		t.Errorf("%d tasks ran at once on a worker of concurrency 8", peak)
	}
	if h.many.Load() == 0 {
		t.Error("no look took more than one task")
	}
	ctx := context.Background()
	poll(t, "asynq to mark every task done", func() bool {
		n, err := s.rdb.LLen(ctx, "asynq:{default}:active").Result()
		return err == nil && n == 0
	})
	if n, err := s.rdb.LLen(ctx, "asynq:{default}:pending").Result(); err != nil || n != 0 {
		t.Errorf("pending list: %d tasks (%v), want none", n, err)
	}
}
