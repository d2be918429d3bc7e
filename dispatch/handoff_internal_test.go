package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Done holds a capped tenant's finished task's worker until the tenant's
// next task is in asynq's pending list, at the end asynq takes from: the
// worker whose slot frees takes it. A task of a tenant without a cap, and
// a task Finished never heard of, are let go at once. asynq's dequeue and
// done are played by hand, so that nothing but Done's wait can have moved
// the next task in when Done returns.
func TestDoneHandsTheFreedWorkerItsTenantsNextTask(t *testing.T) {
	ctx := context.Background()
	d, rdb, ac, s := handOffRig(t)
	const pending, active = "asynq:{default}:pending", "asynq:{default}:active"
	ids := []string{"a", "b", "c", "d"}
	parkInLine(ctx, t, d, ac, ids)
	for i, id := range ids[:3] {
		// asynq's worker takes id, runs it, and marks it done.
		if got := rdb.LMove(ctx, pending, active, "RIGHT", "LEFT").Val(); got != id {
			t.Fatalf("a worker took %q from the pending list, want %q", got, id)
		}
		rdb.HSet(ctx, "asynq:{default}:t:"+id, "state", "active")
		s.Finished("default", "t", id, time.Millisecond, true)
		rdb.LRem(ctx, active, 0, id)
		rdb.Del(ctx, "asynq:{default}:t:"+id)
		s.Done("default", id)
		// Its slot frees now: the next task must be there for it.
		if got, want := rdb.LIndex(ctx, pending, -1).Val(), ids[i+1]; got != want {
			t.Fatalf("when %s's worker frees, the pending list's next is %q, want %q (later %q)", id, got, want, rdb.LRange(ctx, pending, 0, -1).Val())
		}
	}
	began := time.Now()
	s.Done("default", "unknown")
	if waited := time.Since(began); waited > time.Second {
		t.Errorf("Done of a task Finished never heard of waited %v", waited)
	}
}

// AwaitMove waits only while the loop expects to move tasks in, returns
// at once when a move came after the one the caller saw, and is woken by
// the next move otherwise.
func TestAwaitMoveWaitsOnlyForAnExpectedMove(t *testing.T) {
	l := &loop{}
	s := &Server{loops: map[string]*loop{"q": l}}
	if s.AwaitMove("other", 0, time.Minute) || s.AwaitMove("q", 0, time.Minute) {
		t.Fatal("waited on a queue it does not serve, or with no move expected")
	}
	l.moves.moved(true)
	if n := s.Moves("q"); n != 1 {
		t.Fatalf("Moves = %d after one move, want 1", n)
	}
	if !s.AwaitMove("q", 0, time.Minute) {
		t.Fatal("a move after the caller's look did not count")
	}
	woke := make(chan bool)
	go func() { woke <- s.AwaitMove("q", 1, time.Minute) }()
	time.Sleep(10 * time.Millisecond)
	l.moves.moved(false)
	select {
	case ok := <-woke:
		if !ok {
			t.Error("the next move did not wake the wait")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the next move did not wake the wait")
	}
	if s.AwaitMove("q", 2, time.Minute) {
		t.Error("waited when the last move said none is expected")
	}
	l.moves.expect(true)
	began := time.Now()
	if !s.AwaitMove("q", 2, 20*time.Millisecond) || time.Since(began) < 20*time.Millisecond {
		t.Error("an expected move that did not come: want a wait of the whole time, then true")
	}
}

// handOffRig is a dispatcher on a real Redis whose tenants are capped at 1
// (q1), serving a worker of concurrency 2 on queue default that hands off,
// with Done's wait long enough for any machine: its bound is not what the
// tests test.
func handOffRig(t *testing.T) (*Dispatcher, *redis.Client, *asynq.Client, *Server) {
	t.Helper()
	d, rdb, ac := rig(t, q1)
	s, err := d.Serve(Worker{Queues: []string{"default"}, Concurrency: 2, HandOff: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.handOffWait = time.Minute
	return d, rdb, ac, s
}

// parkInLine parks tenant t's tasks ids in queue default and writes them
// as its producer would: the first goes straight in, the others wait.
func parkInLine(ctx context.Context, t *testing.T, d *Dispatcher, ac *asynq.Client, ids []string) {
	t.Helper()
	for i, id := range ids {
		tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: id}, q1)
		want, at := Wait, ParkedUntil
		if i == 0 {
			want, at = Straight, time.Now()
		}
		if err != nil || tk.Verdict != want {
			t.Fatalf("%s's park: %v %v, want %v", id, tk.Verdict, err, want)
		}
		if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id), asynq.ProcessAt(at)); err != nil {
			t.Fatal(err)
		}
	}
}
