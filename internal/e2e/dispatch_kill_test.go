package e2e

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/worker"
)

// childEnv, when set to a Redis address, makes the test binary run
// runChildWorker instead of the tests.
const childEnv = "ADMITQ_E2E_CHILD_WORKER"

// runChildWorker runs a fair worker with a gate on the Redis at $childEnv,
// for a tenant capped at 1, whose handler hangs until the process dies.
// The parent SIGKILLs it.
func runChildWorker() int {
	addr := os.Getenv(childEnv)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	q := admission.Quota{Limit: 1000, Window: time.Second, MaxInFlight: 1}
	g := admission.New(rdb, admission.StaticQuotas{Default: &q})
	w := worker.New(asynq.RedisClientOpt{Addr: addr}, worker.Config{
		Concurrency: 2, Gate: g, Fair: true,
		TaskCheckInterval: 5 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
	})
	err := w.Run(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		<-ctx.Done()
		return ctx.Err()
	}))
	if err != nil {
		return 1
	}
	return 0
}

// TestSIGKILLMidTaskLosesNothingRunsNothingTwice runs a capped tenant's
// task on a worker process that is then killed with SIGKILL mid-task.
// asynq still holds the task (active, under its lease) so the tenant's
// place stays taken and the cap holds: the next task does not start on
// another worker. Once asynq's recoverer takes the task back (its lease
// lapsed, here made to lapse at once), it runs again, once, and then the
// next task runs: nothing lost, nothing run twice.
func TestSIGKILLMidTaskLosesNothingRunsNothingTwice(t *testing.T) {
	t.Parallel()
	q := admission.Quota{Limit: 1000, Window: time.Second, MaxInFlight: 1}
	s := newStack(t, admission.StaticQuotas{Default: &q})
	ctx := context.Background()
	rdb := s.backend.newClient(t)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(exe, "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+s.backend.server.Addr())
	child.Stdout, child.Stderr = os.Stdout, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatalf("starting the child worker: %v", err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	poll(t, "the child worker serves the queue", func() bool {
		n, _ := rdb.ZCard(ctx, "admitq:fair:{"+s.queue+"}:workers").Result()
		return n > 0
	})
	if _, d, err := s.enqueue(ctx, "t", asynq.NewTask("hang", nil), asynq.TaskID("a")); err != nil || d.Outcome != admission.Admitted {
		t.Fatalf("Enqueue a: %v, %v", d.Outcome, err)
	}
	if _, d, err := s.enqueue(ctx, "t", asynq.NewTask("next", nil), asynq.TaskID("b")); err != nil || d.Outcome != admission.Parked {
		t.Fatalf("Enqueue b: %v, %v; want parked", d.Outcome, err)
	}
	poll(t, "task a active on the child worker", func() bool {
		info, err := s.inspector.GetTaskInfo(s.queue, "a")
		return err == nil && info.State == asynq.TaskStateActive
	})
	time.Sleep(200 * time.Millisecond)
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	rec := newRecorder(2)
	cfg := testWorkerConfig(t, 2)
	cfg.Gate, cfg.Fair = s.gate, true
	cfg.TaskCheckInterval = 5 * time.Millisecond
	cfg.RetryDelayFunc = func(int, error, *asynq.Task) time.Duration { return 0 }
	// asynq's lease on a is good for 30 s: meanwhile the cap holds.
	w := worker.New(s.backend.conn, cfg)
	if err := w.Start(rec); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // past a repair pass of the new worker
	if n := rec.seen.Load(); n != 0 {
		t.Fatalf("%d tasks started while asynq still held a on the dead worker; want none (cap 1)", n)
	}
	w.Shutdown()

	// Let a's lease lapse, as 30 s would; a new worker's recoverer takes a
	// back at its start, and a runs again before b.
	lease := "asynq:{" + s.queue + "}:lease"
	if err := rdb.ZAdd(ctx, lease, redis.Z{Score: 1, Member: "a"}).Err(); err != nil {
		t.Fatal(err)
	}
	s.startWorker(t, cfg, rec)
	got := rec.wait(t)
	if got[0].ID != "a" || got[1].ID != "b" {
		t.Fatalf("started %q then %q; want a (recovered) then b", got[0].ID, got[1].ID)
	}
}
