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

// childLease is the child worker's PermitLease.
const childLease = time.Second

// runChildWorker runs a worker with a gate on the Redis at $childEnv, for
// a tenant capped at 1, whose handler hangs until the process dies. The
// parent SIGKILLs it.
func runChildWorker() int {
	addr := os.Getenv(childEnv)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	q := admission.Quota{Limit: 1000, Window: time.Second, MaxInFlight: 1}
	g := admission.New(rdb, admission.StaticQuotas{Default: &q})
	w := worker.New(asynq.RedisClientOpt{Addr: addr}, worker.Config{
		Concurrency:       2,
		Gate:              g,
		PermitLease:       childLease,
		TaskCheckInterval: 5 * time.Millisecond,
		// Its reconciler must not be the one that hands the permit on.
		ReconcileInterval: time.Hour,
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

// TestDepthPermitLapsesAfterWorkerSIGKILL runs a capped tenant's task on
// a worker process that is then killed with SIGKILL mid-task. The permit
// must not be held for ever: the next parked task starts on another worker
// within the child's PermitLease plus the reconcile interval (and some
// slack for a loaded machine), long before asynq itself would give up on
// the dead worker's task (30 s past its lease, checked each minute).
func TestDepthPermitLapsesAfterWorkerSIGKILL(t *testing.T) {
	t.Parallel()
	q := admission.Quota{Limit: 1000, Window: time.Second, MaxInFlight: 1}
	s := newStack(t, admission.StaticQuotas{Default: &q})
	ctx := context.Background()
	if _, d, err := s.enqueue(ctx, "t", asynq.NewTask("hang", nil), asynq.TaskID("a")); err != nil || d.Outcome != admission.Admitted {
		t.Fatalf("Enqueue a: %v, %v", d.Outcome, err)
	}
	if _, d, err := s.enqueue(ctx, "t", asynq.NewTask("next", nil), asynq.TaskID("b")); err != nil || d.Outcome != admission.Parked {
		t.Fatalf("Enqueue b: %v, %v; want parked", d.Outcome, err)
	}

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
	poll(t, "task a active on the child worker", func() bool {
		info, err := s.inspector.GetTaskInfo(s.queue, "a")
		return err == nil && info.State == asynq.TaskStateActive
	})
	time.Sleep(200 * time.Millisecond) // its first lease is written
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed := time.Now()
	if u := depthOf(t, s, "t"); u.InFlight != 1 || u.Parked != 1 {
		t.Fatalf("after the kill: in flight %d, parked %d; want 1, 1", u.InFlight, u.Parked)
	}

	rec := newRecorder(1)
	cfg := depthWorkerConfig(t, s, 2)
	s.startWorker(t, cfg, rec)
	st := rec.wait(t)[0]
	held := st.At.Sub(killed)
	bound := childLease + cfg.ReconcileInterval*6/5
	t.Logf("the dead worker's permit went to the next parked task %v after the SIGKILL (lease %v, reconcile %v)", held, childLease, cfg.ReconcileInterval)
	if st.ID != "b" {
		t.Fatalf("started %q, want b", st.ID)
	}
	if held > bound+2*time.Second {
		t.Errorf("the permit was held %v after the kill, want at most %v plus slack", held, bound)
	}
	info, err := s.inspector.GetTaskInfo(s.queue, "a")
	if err != nil || info.State != asynq.TaskStateActive {
		t.Fatalf("task a: %v, %v; want still active in asynq (its lease is asynq's to end)", info, err)
	}
}
