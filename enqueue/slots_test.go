package enqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// These tests hold Enqueue to its accounting on a real Redis: every task in
// asynq's queues holds a slot in its tenant's log, and a slot that no task
// holds is given back once the calls that took it are done.

// live is an enqueue.Client on a redis-server of its own.
type live struct {
	srv      *redistest.Server
	rdb      *redis.Client // the gate's connection, and the tests'
	asynqRDB *redis.Client // asynq's connection, for hooks
	gate     *admission.Gate
	client   *enqueue.Client
}

type liveConfig struct {
	quota     admission.Quota
	gateHook  redis.Hook // on the gate's connection only; nil means none
	asynqHook redis.Hook // on asynq's connection only; nil means none
	opts      []enqueue.Option
}

func newLive(t *testing.T, cfg liveConfig) *live {
	t.Helper()
	srv := redistest.Start(t)
	l := &live{srv: srv, rdb: srv.Client(t), asynqRDB: srv.Client(t)}
	if cfg.gateHook != nil {
		l.rdb.AddHook(cfg.gateHook)
	}
	if cfg.asynqHook != nil {
		l.asynqRDB.AddHook(cfg.asynqHook)
	}
	l.gate = admission.New(l.rdb, admission.StaticQuotas{Default: &cfg.quota})
	t.Cleanup(func() { _ = l.gate.Close() })
	l.client = enqueue.NewFromRedis(l.asynqRDB, l.gate, cfg.opts...)
	return l
}

// entries returns the IDs in every tenant's log.
func (l *live) entries(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	keys, err := l.srv.Client(t).Keys(ctx, "admitq:{*}:log").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	var ids []string
	for _, k := range keys {
		ms, err := l.srv.Client(t).ZRange(ctx, k, 0, -1).Result()
		if err != nil {
			t.Fatalf("ZRANGE %s: %v", k, err)
		}
		ids = append(ids, ms...)
	}
	return ids
}

// tasks returns the IDs of the tasks in asynq's default queue, whatever
// their state.
func (l *live) tasks(t *testing.T) []string {
	t.Helper()
	keys, err := l.srv.Client(t).Keys(context.Background(), "asynq:{default}:t:*").Result()
	if err != nil {
		t.Fatalf("KEYS: %v", err)
	}
	for i, k := range keys {
		keys[i] = strings.TrimPrefix(k, "asynq:{default}:t:")
	}
	return keys
}

// unheld returns the tasks in asynq that hold no slot, and the slots that
// no task holds.
func (l *live) unheld(t *testing.T) (tasks, slots []string) {
	t.Helper()
	inLog := make(map[string]bool)
	for _, id := range l.entries(t) {
		inLog[id] = true
	}
	inAsynq := make(map[string]bool)
	for _, id := range l.tasks(t) {
		inAsynq[id] = true
		if !inLog[id] {
			tasks = append(tasks, id)
		}
	}
	for id := range inLog {
		if !inAsynq[id] {
			slots = append(slots, id)
		}
	}
	return tasks, slots
}

// unusedPermits returns the task IDs that hold a permit, or wait parked for
// one, in any tenant's sets but have no task in asynq.
func (l *live) unusedPermits(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	inAsynq := make(map[string]bool)
	for _, id := range l.tasks(t) {
		inAsynq[id] = true
	}
	var unused []string
	for _, pattern := range []string{"admitq:{*}:permits", "admitq:{*}:parked"} {
		keys, err := l.srv.Client(t).Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatalf("KEYS: %v", err)
		}
		for _, k := range keys {
			refs, err := l.srv.Client(t).ZRange(ctx, k, 0, -1).Result()
			if err != nil {
				t.Fatalf("ZRANGE %s: %v", k, err)
			}
			for _, ref := range refs {
				// "<len(queue)>:<queue><ID>": the queue here is "default".
				if id := strings.TrimPrefix(ref, "7:default"); !inAsynq[id] {
					unused = append(unused, ref)
				}
			}
		}
	}
	return unused
}

// TestEnqueueBatchRefusesDuplicateIDs: a batch that holds one task ID twice
// is refused as a whole, before admission, so that a refused write of one
// copy cannot give back the slot the other copy's task then holds. (Before,
// with a limit of 3: C, the batch's X, D and E all ended up pending.)
func TestEnqueueBatchRefusesDuplicateIDs(t *testing.T) {
	l := newLive(t, liveConfig{quota: admission.Quota{Limit: 3, Window: time.Minute}})
	ctx := context.Background()
	unique := asynq.Unique(time.Hour)
	if _, _, err := l.client.Enqueue(ctx, "acme", asynq.NewTask("t", []byte("c"), unique), asynq.TaskID("C")); err != nil {
		t.Fatalf("Enqueue(C): %v", err)
	}
	rs, err := l.client.EnqueueBatch(ctx, "acme", []*asynq.Task{
		asynq.NewTask("t", []byte("c"), unique, asynq.TaskID("X")), // a duplicate of C: asynq refuses it
		asynq.NewTask("t", []byte("other"), asynq.TaskID("X")),
	})
	if err == nil || !strings.Contains(err.Error(), `"X"`) {
		t.Errorf("EnqueueBatch = %v, %v; want an error naming the duplicate ID X", rs, err)
	}
	for _, id := range []string{"D", "E", "F"} {
		_, _, err := l.client.Enqueue(ctx, "acme", asynq.NewTask("t", []byte(id)), asynq.TaskID(id))
		if id == "F" && !errors.Is(err, enqueue.ErrRejected) {
			t.Errorf("Enqueue(F) = %v, want rejected: C, D and E fill the window", err)
		}
	}
	tasks, slots := l.unheld(t)
	if len(tasks) > 0 || len(slots) > 0 {
		t.Errorf("tasks without a slot: %q; slots without a task: %q", tasks, slots)
	}
	if n := len(l.tasks(t)); n != 3 {
		t.Errorf("%d tasks in asynq, want 3 (the limit)", n)
	}
}

// TestConcurrentSameIDKeepsTheSlot: call A takes the slot of task ID X, and
// call B, with the same ID, is admitted on it (Existing) and goes on to
// write. A's context then ends before A calls asynq. A must not give the
// slot back, since B's task holds it: with a limit of 1, the tenant's next
// task is rejected. This is an HTTP API's Idempotency-Key retried while the
// first request still runs, whose client then hangs up on the first.
func TestConcurrentSameIDKeepsTheSlot(t *testing.T) {
	noLeaksHere(t)
	gateHook := &redistest.ScriptDoneHook{}
	spy := &holdHook{held: make(chan struct{}, 1), release: make(chan struct{})}
	l := newLive(t, liveConfig{quota: admission.Quota{Limit: 1, Window: time.Minute}, gateHook: gateHook, asynqHook: spy})
	bg := context.Background()
	ctxA, cancelA := context.WithCancel(bg)
	defer cancelA()

	bDone := make(chan error, 1)
	var bDecision admission.Decision
	gateHook.Arm(func() {
		// A's admission has run: B is admitted on A's slot and reaches
		// asynq, where its write is held; then A's context ends.
		go func() {
			_, d, err := l.client.Enqueue(bg, "acme", asynq.NewTask("t", []byte("b")), asynq.TaskID("X"))
			bDecision = d
			bDone <- err
		}()
		select {
		case <-spy.held:
		case <-time.After(5 * time.Second):
			t.Error("B's write never reached asynq")
		}
		cancelA()
	})
	_, dA, errA := l.client.Enqueue(ctxA, "acme", asynq.NewTask("t", []byte("a")), asynq.TaskID("X"))
	if !errors.Is(errA, context.Canceled) {
		t.Errorf("A: err = %v, want context.Canceled", errA)
	}
	if dA.Existing {
		t.Errorf("A's decision is Existing, want the one that took the slot")
	}
	close(spy.release)
	if err := <-bDone; err != nil {
		t.Fatalf("B: %v", err)
	}
	if !bDecision.Existing {
		t.Errorf("B's decision = %+v, want Existing (A's slot)", bDecision)
	}
	if _, _, err := l.client.Enqueue(bg, "acme", asynq.NewTask("t", []byte("y")), asynq.TaskID("Y")); !errors.Is(err, enqueue.ErrRejected) {
		t.Errorf("Enqueue(Y) = %v, want rejected: X holds the only slot", err)
	}
	tasks, slots := l.unheld(t)
	if len(tasks) > 0 || len(slots) > 0 {
		t.Errorf("tasks without a slot: %q; slots without a task: %q", tasks, slots)
	}
}

// holdHook holds asynq's first script write (alone or in a pipeline) until
// release is closed, after saying so on held.
type holdHook struct {
	once    sync.Once
	held    chan struct{}
	release chan struct{}
}

func (h *holdHook) hold(cmds []redis.Cmder) {
	for _, c := range cmds {
		if n := c.Name(); n == "evalsha" || n == "eval" {
			h.once.Do(func() {
				h.held <- struct{}{}
				<-h.release
			})
			return
		}
	}
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.hold([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.hold(cmds)
		return next(ctx, cmds)
	}
}

// replayHook sends each of asynq's script writes twice, as go-redis does
// when the reply to the first is lost (a connection killed after Redis ran
// it): the caller sees the second reply only.
type replayHook struct{ replays atomic.Int64 }

func (h *replayHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *replayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n != "evalsha" && n != "eval" {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		h.replays.Add(1)
		return next(ctx, cmd)
	}
}
func (h *replayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "evalsha" {
			return next(ctx, cmds)
		}
		if err := next(ctx, cmds); err != nil {
			return err
		}
		h.replays.Add(1)
		return next(ctx, cmds)
	}
}

// TestReplayedUniqueWriteKeepsItsSlot: go-redis retries a write whose reply
// was lost; the retry of a Unique task finds the lock its own first attempt
// took and asynq reports asynq.ErrDuplicateTask. The task is in the queue,
// so its slot stays, and the error says the task may be there. A duplicate
// refused for another task's lock still gives its slot back.
func TestReplayedUniqueWriteKeepsItsSlot(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			replay := &replayHook{}
			l := newLive(t, liveConfig{
				quota:     admission.Quota{Limit: 1, Window: time.Minute},
				asynqHook: replay,
				opts:      []enqueue.Option{enqueue.WithBatching(batching)},
			})
			bg := context.Background()
			task := asynq.NewTask("t", []byte("u"), asynq.Unique(time.Hour))
			_, d, err := l.client.Enqueue(bg, "acme", task, asynq.TaskID("U"))
			if replay.replays.Load() == 0 {
				t.Fatal("the write was never replayed")
			}
			if !errors.Is(err, asynq.ErrDuplicateTask) {
				t.Fatalf("Enqueue(U) = %v, want asynq.ErrDuplicateTask from the replay", err)
			}
			if !enqueue.IsAmbiguous(err) {
				t.Errorf("IsAmbiguous(%v) = false, want true: the task is in the queue", err)
			}
			if d.Outcome != admission.Admitted || d.Existing {
				t.Errorf("decision = %+v, want admitted by this call", d)
			}
			tasks, slots := l.unheld(t)
			if len(tasks) > 0 || len(slots) > 0 {
				t.Errorf("tasks without a slot: %q; slots without a task: %q", tasks, slots)
			}

			// A true duplicate, in another tenant: asynq's lock is U's.
			_, _, err = l.client.Enqueue(bg, "other", task, asynq.TaskID("V"))
			if !errors.Is(err, asynq.ErrDuplicateTask) || enqueue.IsAmbiguous(err) {
				t.Errorf("Enqueue(V) = %v (ambiguous %v), want a definite asynq.ErrDuplicateTask", err, enqueue.IsAmbiguous(err))
			}
			if u, err := l.gate.Usage(bg, "other"); err != nil || u.InWindow+u.Reserved != 0 {
				t.Errorf("tenant other holds %+v (%v), want no slot: its duplicate wrote nothing", u, err)
			}
		})
	}
}

// TestAbandonedAdmissionGivesItsSlotBack: two Enqueue calls with 50 ms
// deadlines and task IDs of Enqueue's own making leave while Redis is
// paused for 150 ms. Their admissions run when Redis resumes, for nobody:
// the slots must come back, or the tenant (limit 2 an hour) is rejected for
// the rest of the hour.
func TestAbandonedAdmissionGivesItsSlotBack(t *testing.T) {
	l := newLive(t, liveConfig{quota: admission.Quota{Limit: 2, Window: time.Hour}})
	bg := context.Background()
	if err := l.rdb.Ping(bg).Err(); err != nil { // connections up before the pause
		t.Fatal(err)
	}
	l.srv.Pause()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
			defer cancel()
			if _, _, err := l.client.Enqueue(ctx, "acme", asynq.NewTask("t", nil)); err == nil {
				t.Error("Enqueue succeeded on a paused Redis")
			}
		})
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	l.srv.Resume()
	waitUntil(t, 5*time.Second, func() bool { return len(l.entries(t)) == 0 }, func() string {
		return fmt.Sprintf("the log still holds %q after the pause", l.entries(t))
	})
	for i := range 2 {
		if _, _, err := l.client.Enqueue(bg, "acme", asynq.NewTask("t", nil)); err != nil {
			t.Errorf("Enqueue %d after the pause: %v", i, err)
		}
	}
}

// TestShortDeadlinesLeaveNoSlotWithoutTask floods a healthy Redis with
// Enqueue calls whose deadlines are a few milliseconds: many fail, at
// admission or at the write. Once the gate has settled, no slot may be left
// without its task, and no task without its slot. (Before: 5696, 255 and 36
// slots without a task at 2, 5 and 10 ms.) Capped, no permit may be left
// without its task either. (Before, capped calls gave back nothing: 938 and
// 1486 slots, and as many permits, without a task at 2 ms, held until their
// window passed and their leases lapsed.)
func TestShortDeadlinesLeaveNoSlotWithoutTask(t *testing.T) {
	for _, c := range []struct {
		name     string
		deadline time.Duration
		cap      int
	}{
		{"2ms", 2 * time.Millisecond, 0},
		{"5ms", 5 * time.Millisecond, 0},
		{"10ms", 10 * time.Millisecond, 0},
		// A cap no tenant reaches in the run: every task holds a permit.
		{"capped/2ms", 2 * time.Millisecond, 1_000_000},
		{"capped/10ms", 10 * time.Millisecond, 1_000_000},
	} {
		deadline := c.deadline
		t.Run(c.name, func(t *testing.T) {
			l := newLive(t, liveConfig{quota: admission.Quota{Limit: 100_000, Window: time.Minute, MaxInFlight: c.cap}})
			bg := context.Background()
			var ok, failed atomic.Int64
			stop := time.Now().Add(600 * time.Millisecond)
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Go(func() {
					for i := 0; time.Now().Before(stop); i++ {
						ctx, cancel := context.WithTimeout(bg, deadline)
						_, _, err := l.client.Enqueue(ctx, fmt.Sprintf("t%d", (g+i)%20), asynq.NewTask("t", nil))
						cancel()
						if err != nil {
							failed.Add(1)
						} else {
							ok.Add(1)
						}
					}
				})
			}
			wg.Wait()
			var tasks, slots, permits []string
			settled := time.Now().Add(5 * time.Second)
			for {
				tasks, slots = l.unheld(t)
				permits = l.unusedPermits(t)
				if len(tasks)+len(slots)+len(permits) == 0 || time.Now().After(settled) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("deadline %v: %d enqueued, %d failed; %d slots and %d permits without a task, %d tasks without a slot",
				deadline, ok.Load(), failed.Load(), len(slots), len(permits), len(tasks))
			if len(tasks)+len(slots)+len(permits) > 0 {
				t.Errorf("%d slots and %d permits without a task, %d tasks without a slot, want none", len(slots), len(permits), len(tasks))
			}
		})
	}
}

// waitUntil polls cond until it holds, and fails with msg() after d.
func waitUntil(t *testing.T, d time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(msg())
		}
	}
}

// noLeaksHere fails t if goroutines started during it outlive it.
func noLeaksHere(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { redistest.VerifyNoLeaks(t, ignore) })
}
