package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/worker"
)

// Only a task's first run is its first start: a rerun after a throttled
// retry or a shutdown's requeue is not, although neither raises asynq's
// retry count; nor is a retry after a failure.
func TestFirstStartIsOnlyTheFirstRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	type run struct {
		attempt string
		first   bool
	}
	runs := make(chan run, 20)
	aborted := make(chan struct{}, 1)
	var blocked atomic.Bool
	handler := func(ctx context.Context, task *asynq.Task) error {
		first := worker.FirstStart(ctx)
		if again := worker.FirstStart(ctx); again != first {
			t.Errorf("second FirstStart in one run = %v, first = %v", again, first)
		}
		n, _ := asynq.GetRetryCount(ctx)
		switch string(task.Payload()) {
		case "throttle-once":
			runs <- run{"throttle-once", first}
			if first {
				return worker.Throttled(0)
			}
		case "fail-once":
			runs <- run{"fail-once", first}
			if n == 0 {
				return errors.New("boom")
			}
		case "outlive-shutdown":
			runs <- run{"outlive-shutdown", first}
			if blocked.CompareAndSwap(false, true) { // only the first run blocks
				aborted <- struct{}{}
				<-ctx.Done() // asynq cancels it once it has requeued the task
				return ctx.Err()
			}
		}
		return nil
	}
	cfg := testConfig(t)
	cfg.ShutdownTimeout = 300 * time.Millisecond
	cfg.RetryDelayFunc = func(int, error, *asynq.Task) time.Duration { return 0 }
	cfg.DelayedTaskCheckInterval = 100 * time.Millisecond

	// A shutdown while the task runs puts it back in its queue: the next
	// worker's run is not a first start.
	w1 := worker.New(e.redis, cfg)
	if err := w1.Start(asynq.HandlerFunc(handler)); err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, asynq.NewTask("t", []byte("outlive-shutdown")), asynq.MaxRetry(3))
	if r := receive(t, "first run", runs); !r.first {
		t.Errorf("first run of a task: FirstStart = false")
	}
	receive(t, "the run to block", aborted)
	w1.Shutdown()

	e.start(t, cfg, handler)
	if r := receive(t, "run after the requeue", runs); r.first {
		t.Errorf("run after a shutdown requeued the task: FirstStart = true")
	}

	for _, payload := range []string{"throttle-once", "fail-once"} {
		e.enqueue(t, asynq.NewTask("t", []byte(payload)), asynq.MaxRetry(3))
		for i, want := range []bool{true, false} {
			if r := receive(t, payload+" run", runs); r.first != want {
				t.Errorf("%s, run %d: FirstStart = %v, want %v", payload, i+1, r.first, want)
			}
		}
	}
}

func TestFirstStartOutsideWorkerFollowsTheRetryCount(t *testing.T) {
	if !worker.FirstStart(context.Background()) {
		t.Error("FirstStart(context.Background()) = false, want true")
	}
}
