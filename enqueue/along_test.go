package enqueue_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// scriptCalls returns how many script and function calls Redis has run
// since the last CONFIG RESETSTAT: EVALSHA and EVAL, and FCALL.
func scriptCalls(t *testing.T, rdb *redis.Client) (scripts, functions int) {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		var name string
		var n int
		if i := strings.Index(l, ":calls="); strings.HasPrefix(l, "cmdstat_") && i > 0 {
			name = l[len("cmdstat_"):i]
			fmt.Sscanf(l[i+len(":calls="):], "%d", &n)
		}
		switch name {
		case "evalsha", "eval":
			scripts += n
		case "fcall":
			functions += n
		}
	}
	return scripts, functions
}

// A task that waits its turn in a fair queue costs Enqueue one call to
// Redis, the park, which writes it as asynq writes a parked task; one that
// goes straight in is written by asynq after its park and admission. A
// second Enqueue with the ID of a waiting task writes and stores nothing,
// and says it may be there (asynq's ID conflict). Tasks asynq locks
// (asynq.Unique) park and write in two calls, and are written alike.
func TestAWaitingTaskIsWrittenByItsPark(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t)
	k := &keyed{rdb: rs.Client(t)}
	k.gate = admission.New(k.rdb, admission.StaticQuotas{Default: &roomy})
	defer k.gate.Close()
	k.client = enqueue.NewFromRedis(k.rdb, k.gate)
	k.ins = asynq.NewInspectorFromRedisClient(k.rdb)
	srv, err := dispatch.New(k.rdb, k.gate, nil).Serve(dispatch.Worker{Queues: []string{"fair"}, Concurrency: 1, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	enqueue1 := func(id string, opts ...asynq.Option) (*asynq.TaskInfo, admission.Decision, [2]int, error) {
		t.Helper()
		if err := k.rdb.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		info, d, err := k.client.Enqueue(ctx, "acme", asynq.NewTask("job", []byte("payload of "+id)),
			append([]asynq.Option{asynq.Queue("fair"), asynq.TaskID(id), asynq.MaxRetry(7)}, opts...)...)
		s, f := scriptCalls(t, k.rdb)
		return info, d, [2]int{s, f}, err
	}
	// The queue's room goes straight in, each with its park, admission
	// and write.
	i := 0
	for ; ; i++ {
		info, d, calls, err := enqueue1(fmt.Sprint("in", i))
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome == admission.Parked {
			if calls != [2]int{0, 1} {
				t.Errorf("a waiting task took %d script and %d function calls, want the park alone", calls[0], calls[1])
			}
			if info.State != asynq.TaskStateScheduled || !info.NextProcessAt.Equal(enqueue.ParkedUntil) || info.MaxRetry != 7 {
				t.Errorf("the waiting task's info: %v at %v, %d retries", info.State, info.NextProcessAt, info.MaxRetry)
			}
			break
		}
		if info.State != asynq.TaskStatePending || calls[1] < 1 || calls[0] < 1 {
			t.Fatalf("task %d went in as %v, with %v script and function calls", i, info.State, calls)
		}
		if i == 10 {
			t.Fatal("no task waits")
		}
	}
	waiting := fmt.Sprint("in", i)
	stored, err := k.ins.GetTaskInfo("fair", waiting)
	if err != nil {
		t.Fatal(err)
	}
	if stored.State != asynq.TaskStateScheduled || string(stored.Payload) != "payload of "+waiting || stored.MaxRetry != 7 ||
		stored.Headers[enqueue.TenantHeader] != "acme" || stored.Headers[enqueue.SlotHeader] == "" {
		t.Errorf("asynq reads the waiting task as %v, %q, %d retries, headers %v", stored.State, stored.Payload, stored.MaxRetry, stored.Headers)
	}
	fields := func(id string) []string {
		return slices.Sorted(maps.Keys(k.rdb.HGetAll(ctx, "asynq:{fair}:t:"+id).Val()))
	}
	if got := fields(waiting); strings.Join(got, ",") != "msg,state" {
		t.Errorf("the waiting task's hash holds %v, asynq's holds msg and state", got)
	}

	// Its ID again: nothing written, nothing more waits.
	before := k.rdb.HGet(ctx, "asynq:{fair}:t:"+waiting, "msg").Val()
	_, _, calls, err := enqueue1(waiting, asynq.MaxRetry(1))
	if !enqueue.IsAmbiguous(err) || calls != [2]int{0, 1} {
		t.Errorf("Enqueue of a waiting task's ID: %v (ambiguous %v), %v calls; want asynq's conflict, ambiguous, in one call", err, enqueue.IsAmbiguous(err), calls)
	}
	if after := k.rdb.HGet(ctx, "asynq:{fair}:t:"+waiting, "msg").Val(); after != before {
		t.Errorf("the waiting task was written again")
	}
	if n := k.rdb.LLen(ctx, "admitq:fair:{fair}:w:acme").Val(); n != 1 {
		t.Errorf("%d tasks wait, want 1", n)
	}

	// The caller's context ends first: nothing sent, its cause told, and
	// no outage of Redis claimed.
	cause := errors.New("the caller's cause")
	cctx, cancel := context.WithCancelCause(ctx)
	cancel(cause)
	_, _, err = k.client.Enqueue(cctx, "acme", asynq.NewTask("job", nil), asynq.Queue("fair"), asynq.TaskID("cancelled"))
	if !errors.Is(err, cause) || !errors.Is(err, context.Canceled) || errors.Is(err, admission.ErrUnavailable) || enqueue.IsAmbiguous(err) ||
		k.rdb.Exists(ctx, "asynq:{fair}:t:cancelled").Val() != 0 {
		t.Errorf("a cancelled call: %v (ambiguous %v), want its cause, not unavailable, nothing written", err, enqueue.IsAmbiguous(err))
	}

	// Out of memory: refused before it runs, nothing stored or written.
	waits := func() int64 { return k.rdb.LLen(ctx, "admitq:fair:{fair}:w:acme").Val() }
	if err := k.rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := k.rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = enqueue1("oom")
	if err := k.rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, enqueue.ErrOutOfMemory) || enqueue.IsAmbiguous(err) || k.rdb.Exists(ctx, "asynq:{fair}:t:oom").Val() != 0 || waits() != 1 {
		t.Errorf("out of memory: %v (ambiguous %v), %d waiting", err, enqueue.IsAmbiguous(err), waits())
	}

	// Run, and its reply lost: it may be there, and it is, once; the
	// caller's retry with the ID finds it and stores nothing.
	lose := &loseReply{}
	lossy := rs.Client(t)
	lossy.AddHook(lose)
	late := enqueue.NewFromRedis(lossy, k.gate)
	lose.armed.Store(true)
	for i := range 2 {
		_, _, err = late.Enqueue(ctx, "acme", asynq.NewTask("job", nil), asynq.Queue("fair"), asynq.TaskID("late"))
		if !enqueue.IsAmbiguous(err) || errors.Is(err, admission.ErrUnavailable) {
			t.Errorf("call %d, its reply lost: %v (ambiguous %v), want ambiguous and no failure of admission", i+1, err, enqueue.IsAmbiguous(err))
		}
		if info, err := k.ins.GetTaskInfo("fair", "late"); err != nil || info.State != asynq.TaskStateScheduled || waits() != 2 {
			t.Errorf("call %d: the task whose reply was lost: %v, %d waiting; want it parked, 2 waiting", i+1, err, waits())
		}
	}
	// An ID Enqueue made, its reply lost: as ambiguous, and there once.
	lose.armed.Store(true)
	_, _, err = late.Enqueue(ctx, "acme", asynq.NewTask("job", nil), asynq.Queue("fair"))
	if !enqueue.IsAmbiguous(err) || waits() != 3 {
		t.Errorf("a made ID whose reply was lost: %v, %d waiting; want ambiguous, 3 waiting", err, waits())
	}

	// A task with a unique lock: a park, then asynq's write.
	_, d, calls, err := enqueue1("locked", asynq.Unique(3600e9))
	if err != nil || d.Outcome != admission.Parked {
		t.Fatalf("a locked task: %v, %v", d.Outcome, err)
	}
	if calls[1] != 1 || calls[0] < 1 {
		t.Errorf("a locked task took %d script and %d function calls, want a park and asynq's write", calls[0], calls[1])
	}
	if got := fields("locked"); strings.Join(got, ",") != "msg,state,unique_key" {
		t.Errorf("the locked task's hash holds %v", got)
	}
}

// loseReply, once armed, lets the next function call (FCALL) run and then
// fails it as a connection lost before its reply would.
type loseReply struct{ armed atomic.Bool }

func (h *loseReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && cmd.Name() == "fcall" && h.armed.CompareAndSwap(true, false) {
			cmd.SetErr(io.ErrUnexpectedEOF)
			return io.ErrUnexpectedEOF
		}
		return err
	}
}

func (h *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if cmd.Err() == nil && cmd.Name() == "fcall" && h.armed.CompareAndSwap(true, false) {
				cmd.SetErr(io.ErrUnexpectedEOF)
				err = io.ErrUnexpectedEOF
			}
		}
		return err
	}
}

// EnqueueBatch parks and writes each waiting task of a fair queue in one
// call. When the first task's park may have written it before failing,
// the batch returns results: that task's failure, ambiguous, and the
// others not admitted.
func TestABatchWritesEachWaitingTaskWithItsPark(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t)
	rdb := rs.Client(t)
	lose := &loseReply{}
	rdb.AddHook(lose)
	gate := admission.New(rdb, admission.StaticQuotas{Default: &roomy})
	defer gate.Close()
	srv, err := dispatch.New(rdb, gate, nil).Serve(dispatch.Worker{Queues: []string{"fair"}, Concurrency: 1, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	client := enqueue.NewFromRedis(rdb, gate)
	batch := func(n int) []*asynq.Task {
		ts := make([]*asynq.Task, n)
		for i := range ts {
			ts[i] = asynq.NewTask("job", []byte(fmt.Sprint(i)))
		}
		return ts
	}
	// The queue's room goes straight in; the rest wait.
	if _, err := client.EnqueueBatch(ctx, "acme", batch(4), asynq.Queue("fair")); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := client.EnqueueBatch(ctx, "acme", batch(5), asynq.Queue("fair"))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil || r.Decision.Outcome != admission.Parked || r.Info.State != asynq.TaskStateScheduled {
			t.Fatalf("task %d: %v, %v", i, r.Decision.Outcome, r.Err)
		}
	}
	if s, f := scriptCalls(t, rdb); s != 0 || f != 5 {
		t.Errorf("5 waiting tasks took %d script and %d function calls, want 5 parks alone", s, f)
	}
	waits := func() int64 { return rdb.LLen(ctx, "admitq:fair:{fair}:w:acme").Val() }
	before := waits()

	lose.armed.Store(true)
	res, err = client.EnqueueBatch(ctx, "acme", batch(3), asynq.Queue("fair"))
	if err != nil {
		t.Fatalf("a batch whose first park may have written its task: %v, want results", err)
	}
	if !enqueue.IsAmbiguous(res[0].Err) {
		t.Errorf("the first task: %v, want ambiguous", res[0].Err)
	}
	for i, r := range res[1:] {
		if !errors.Is(r.Err, admission.ErrUnavailable) || enqueue.IsAmbiguous(r.Err) || r.Info != nil {
			t.Errorf("task %d: %v, want not admitted, unavailable", i+1, r.Err)
		}
	}
	if got := waits(); got != before+1 {
		t.Errorf("%d tasks wait, want %d: the first task's", got, before+1)
	}
}
