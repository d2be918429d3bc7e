package worker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
)

// heard records what a handOff tells the dispatcher, and whether asynq
// still held the task as active then.
type heard struct {
	rdb         *redis.Client
	mu          sync.Mutex
	ids, active []string
}

func (h *heard) Done(queue, id string) bool {
	still := queue != "q" || h.rdb.LPos(context.Background(), "asynq:{q}:active", id, redis.LPosArgs{}).Err() == nil
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids = append(h.ids, id)
	if still {
		h.active = append(h.active, id)
	}
	return false
}

func (h *heard) Moves(string) uint64                          { return 0 }
func (h *heard) AwaitMove(string, uint64, time.Duration) bool { return false }

func (h *heard) heard() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(slices.Values(h.ids))
}

// A handOff hears asynq's own scripts that mark a task done, and only
// those: with asynq on a real Redis, the tasks that succeed (one deleted
// at once, one kept for its retention) are heard once each, after asynq
// took them out of its active list, and the tasks that fail (retried, or
// archived) are not. So an asynq that renamed or reordered its keys fails
// here, not in production, where the dispatcher would only lose the
// hand-off.
func TestHandOffHearsAsynqMarkTasksDone(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	h := &heard{rdb: rdb}
	as := asynq.NewServerFromRedisClient(handOff{UniversalClient: rdb, disp: h}, asynq.Config{
		Concurrency: 2, Queues: map[string]int{"q": 1}, TaskCheckInterval: 10 * time.Millisecond,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Hour },
		LogLevel:       asynq.FatalLevel,
	})
	err := as.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		if t.Type() == "fails" {
			return errors.New("fails")
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer as.Shutdown()
	c := asynq.NewClientFromRedisClient(rdb)
	for _, task := range []struct {
		id, kind string
		opts     []asynq.Option
	}{
		{"done", "ok", nil},
		{"kept", "ok", []asynq.Option{asynq.Retention(time.Hour)}},
		{"retried", "fails", []asynq.Option{asynq.MaxRetry(3)}},
		{"archived", "fails", []asynq.Option{asynq.MaxRetry(0)}},
	} {
		if _, err := c.Enqueue(asynq.NewTask(task.kind, nil), append(task.opts, asynq.Queue("q"), asynq.TaskID(task.id))...); err != nil {
			t.Fatal(err)
		}
	}
	ctx := t.Context()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.ZCard(ctx, "asynq:{q}:retry").Val() != 1 || rdb.ZCard(ctx, "asynq:{q}:archived").Val() != 1 || len(h.heard()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the tasks did not all end: heard %q", h.heard())
		}
		time.Sleep(5 * time.Millisecond)
	}
	as.Shutdown()
	if got, want := h.heard(), []string{"done", "kept"}; !slices.Equal(got, want) {
		t.Errorf("heard %q marked done, want %q", got, want)
	}
	if len(h.active) > 0 {
		t.Errorf("heard %q while asynq held them as active", h.active)
	}
}

// markedDone reads the keys of asynq's Done and MarkAsComplete scripts,
// and of no other: its requeue script also starts with the active list and
// the leases.
func TestMarkedDoneReadsOnlyTheDoneScriptsKeys(t *testing.T) {
	for _, c := range []struct {
		keys      []string
		queue, id string
	}{
		{[]string{"asynq:{q}:active", "asynq:{q}:lease", "asynq:{q}:t:a", "asynq:{q}:processed:2026-12-05", "asynq:{q}:processed"}, "q", "a"},
		{[]string{"asynq:{q}:active", "asynq:{q}:lease", "asynq:{q}:completed", "asynq:{q}:t:a", "x", "y"}, "q", "a"},
		{[]string{"asynq:{a:b}:active", "asynq:{a:b}:lease", "asynq:{a:b}:t:x:y", "p"}, "a:b", "x:y"},
		{[]string{"asynq:{q}:active", "asynq:{q}:lease", "asynq:{q}:pending", "asynq:{q}:t:a"}, "", ""}, // requeue
		{[]string{"asynq:{q}:t:a", "asynq:{q}:active", "asynq:{q}:lease", "asynq:{q}:retry"}, "", ""},   // retry
		{[]string{"asynq:{q}:active", "asynq:{r}:lease", "asynq:{q}:t:a", "p"}, "", ""},                 // another queue's leases
		{[]string{"asynq:{q}:active", "asynq:{q}:lease", "asynq:{r}:t:a", "p"}, "", ""},                 // another queue's task
		{[]string{"asynq:{q}:active", "asynq:{q}:lease", "asynq:{q}:t:", "p"}, "", ""},                  // no ID
		{[]string{"asynq:{q}:active", "asynq:{q}:lease", "asynq:{q}:t:a"}, "", ""},                      // too few
		{[]string{"admitq:{q}:active", "admitq:{q}:lease", "admitq:{q}:t:a", "p"}, "", ""},              // not asynq's
		{[]string{"x{q}:active", "asynq:{x{q}:lease", "asynq:{x{q}:t:a", "p"}, "", ""},                  // no asynq prefix
	} {
		q, id, ok := markedDone(c.keys)
		if ok != (c.id != "") || q != c.queue || id != c.id {
			t.Errorf("markedDone(%q) = %q, %q, %v; want %q, %q", c.keys, q, id, ok, c.queue, c.id)
		}
	}
}

// mover moves a task into queue q when asked to wait for a move, as the
// dispatcher would, once.
type mover struct {
	heard
	c     *asynq.Client
	once  sync.Once
	calls chan uint64
}

func (m *mover) Moves(string) uint64 { return 7 }

func (m *mover) AwaitMove(queue string, n uint64, _ time.Duration) bool {
	moved := false
	m.once.Do(func() {
		_, err := m.c.Enqueue(asynq.NewTask("moved", nil), asynq.Queue(queue))
		moved = err == nil
		m.calls <- n
	})
	return moved
}

// An asynq look into an empty queue waits for the dispatcher's next move
// and looks again when there was one: the task moved in runs at once,
// where asynq would sleep its TaskCheckInterval (here a minute) first.
func TestALookIntoAnEmptyQueueWaitsForTheNextMove(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	m := &mover{heard: heard{rdb: rdb}, c: asynq.NewClientFromRedisClient(rdb), calls: make(chan uint64, 1)}
	ran := make(chan string, 1)
	as := asynq.NewServerFromRedisClient(handOff{UniversalClient: rdb, disp: m, wait: time.Second, stopped: new(atomic.Bool)}, asynq.Config{
		Concurrency: 1, Queues: map[string]int{"q": 1}, TaskCheckInterval: time.Minute, LogLevel: asynq.FatalLevel,
	})
	if err := as.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		ran <- t.Type()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	defer as.Shutdown()
	select {
	case n := <-m.calls:
		if n != 7 {
			t.Errorf("the look waited for moves after the %d-th, want after the 7th (Moves before it looked)", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an empty look did not wait for a move")
	}
	select {
	case typ := <-ran:
		if typ != "moved" {
			t.Errorf("ran %q, want the task moved in", typ)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the task moved in did not run at once: asynq slept its TaskCheckInterval")
	}
}

// dequeues reads the keys of asynq's Dequeue script, and of no other.
func TestDequeuesReadsOnlyTheDequeueScriptsKeys(t *testing.T) {
	for _, c := range []struct {
		keys  []string
		queue string
	}{
		{[]string{"asynq:{q}:pending", "asynq:{q}:paused", "asynq:{q}:active", "asynq:{q}:lease"}, "q"},
		{[]string{"asynq:{a:b}:pending", "asynq:{a:b}:paused", "asynq:{a:b}:active", "asynq:{a:b}:lease"}, "a:b"},
		{[]string{"asynq:{q}:pending", "asynq:{q}:paused", "asynq:{q}:active"}, ""},
		{[]string{"asynq:{q}:pending", "asynq:{q}:paused", "asynq:{q}:active", "asynq:{q}:lease", "x"}, ""},
		{[]string{"asynq:{q}:pending", "asynq:{r}:paused", "asynq:{q}:active", "asynq:{q}:lease"}, ""},
		{[]string{"asynq:{q}:scheduled", "asynq:{q}:pending", "asynq:{q}:active", "asynq:{q}:lease"}, ""},
		{[]string{"asynq:{q}:active", "asynq:{q}:lease", "asynq:{q}:t:a", "p"}, ""},
		{[]string{"x{q}:pending", "asynq:{x{q}:paused", "asynq:{x{q}:active", "asynq:{x{q}:lease"}, ""},
	} {
		q, ok := dequeues(c.keys)
		if ok != (c.queue != "") || q != c.queue {
			t.Errorf("dequeues(%q) = %q, %v; want %q", c.keys, q, ok, c.queue)
		}
	}
}
