package worker

import (
	"context"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// startedField is the field of asynq's task hash that marks a task's first
// start. asynq sets only its own fields of the hash, so the mark stays
// through retries and requeues and goes when the task is deleted.
const startedField = "admitq_started"

// firstStartTimeout bounds the Redis call of FirstStart.
const firstStartTimeout = 2 * time.Second

type startKey struct{}

// starts marks first starts for one Worker.
type starts struct {
	rdb    redis.UniversalClient
	script *redis.Script
}

// start is one run of one task; its mark is read at most once.
type start struct {
	s     *starts
	once  sync.Once
	first bool
	ok    bool
}

func (s *starts) with(ctx context.Context) context.Context {
	if s == nil {
		return ctx
	}
	return context.WithValue(ctx, startKey{}, &start{s: s})
}

// FirstStart reports whether the task being handled is starting for the
// first time. asynq's retry count (asynq.GetRetryCount) says when a task is
// retried after a failure, but not when it runs again after a throttled
// retry (see Throttled) or after a shutdown put it back in its queue: neither
// counts as a failure. So the Worker marks a task's first start in asynq's
// own record of the task, which lasts as long as the task.
//
// The mark is written by the first call for a run, which costs one Redis
// round trip; later calls in the same run return the same answer. A task
// whose retry count is above zero costs nothing. Call it from the handler or
// from middleware in Config.Middleware, for example to measure how long a
// task waited before it first started.
//
// When ctx does not come from a Worker, or the mark cannot be read, it falls
// back to the retry count: true when that is zero or unknown.
func FirstStart(ctx context.Context) bool {
	n, ok := asynq.GetRetryCount(ctx)
	if ok && n > 0 {
		return false
	}
	st, _ := ctx.Value(startKey{}).(*start)
	if st == nil {
		return true
	}
	st.once.Do(func() { st.first, st.ok = st.s.mark(ctx) })
	return st.first || !st.ok
}

// mark sets the first-start mark of ctx's task and reports whether it was
// new; ok is false when that is not known.
func (s *starts) mark(ctx context.Context) (first, ok bool) {
	id, idOK := asynq.GetTaskID(ctx)
	queue, qOK := asynq.GetQueueName(ctx)
	if !idOK || !qOK {
		return false, false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), firstStartTimeout)
	defer cancel()
	// asynq's key of the task hash (asynq/internal/base.TaskKey).
	key := asynqKeys(queue) + "t:" + id
	n, err := s.script.Run(ctx, s.rdb, []string{key}, startedField).Int64()
	if err != nil || n < 0 {
		return false, false
	}
	return n == 1, true
}
