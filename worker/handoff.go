package worker

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// handOff is the Redis client a Worker with a gate gives asynq: the
// caller's, which also hears two of asynq's scripts on the way back.
//
//   - When asynq's script that marks a task done has run, before asynq
//     frees the task's slot, it tells the dispatcher (dispatch.Server.Done).
//     So the worker that finishes a capped tenant's task takes the
//     tenant's next one, which the dispatcher moves in at the front of the
//     queue meanwhile.
//   - When asynq's look for a task finds the queue empty while the
//     dispatcher expects to move tasks in soon, it looks again as soon as
//     the dispatcher has, or after wait, for as long as the dispatcher
//     expects moves, up to lookFor (dispatch.Server.AwaitMove). asynq
//     would sleep about its TaskCheckInterval before it looks again, and
//     stop taking tasks for every slot of the worker meanwhile.
//
// Only the scripts asynq runs go through it: the gate, the dispatcher and
// the caller use the client itself.
type handOff struct {
	redis.UniversalClient
	disp dispatcher
	// wait is how long a look into an empty queue waits for the
	// dispatcher before it looks again (0: it does not wait).
	wait time.Duration
	// stopped ends the waits: the Worker is stopping.
	stopped *atomic.Bool
	// ahead, when set, answers asynq's looks (takeAhead).
	ahead *takeAhead
}

// lookFor is the longest one of asynq's looks waits in all: asynq dates
// the lease of the task it takes from before the look.
const lookFor = time.Second

// dispatcher is what handOff tells (a *dispatch.Server).
type dispatcher interface {
	Done(queue, id string) bool
	Moves(queue string) uint64
	AwaitMove(queue string, n uint64, wait time.Duration) bool
}

// EvalSha runs a script as the client does, and acts on asynq's. asynq
// runs its scripts with redis.Script, which calls EvalSha, then Eval when
// Redis does not have the script yet.
func (h handOff) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	ctx = settleContext(ctx, keys)
	return h.heard(ctx, keys, args, func() *redis.Cmd { return h.UniversalClient.EvalSha(ctx, sha, keys, args...) })
}

// Eval is EvalSha's fallback.
func (h handOff) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	ctx = settleContext(ctx, keys)
	return h.heard(ctx, keys, args, func() *redis.Cmd { return h.UniversalClient.Eval(ctx, script, keys, args...) })
}

// heard runs a script with keys (run), and acts on what it was.
func (h handOff) heard(ctx context.Context, keys []string, args []any, run func() *redis.Cmd) *redis.Cmd {
	queue, look := dequeues(keys)
	if look && h.ahead != nil {
		asynqs := run
		run = func() *redis.Cmd { return h.ahead.look(ctx, queue, keys, args, asynqs) }
	}
	if !look || h.wait <= 0 {
		cmd := run()
		if queue, id, ok := markedDone(keys); ok && cmd.Err() == nil && h.disp.Done(queue, id) && h.ahead != nil {
			h.ahead.front()
		}
		if h.ahead != nil && !look {
			h.ahead.freed(keys)
		}
		return cmd
	}
	until := time.Now().Add(lookFor)
	for {
		n := h.disp.Moves(queue) // before the look, so that no move is missed
		cmd := run()
		wait := min(h.wait, time.Until(until))
		if !errors.Is(cmd.Err(), redis.Nil) || wait <= 0 || h.stopped.Load() {
			return cmd
		}
		if !h.disp.AwaitMove(queue, n, wait) || h.stopped.Load() { // no look after Stop
			return cmd
		}
	}
}

// settleContext returns the context to run asynq's script with keys on:
// ctx, except for a script that takes a task out of the active list
// (settles) whose ctx was cancelled before its deadline, which runs on
// ctx's deadline alone. asynq (v0.26) retries a failed settle, every 5 s
// until the task's lease ends, on the context of the first attempt, which
// it cancels when that attempt returns: so every retry failed, the task
// stayed active until its lease lapsed and asynq's recoverer queued it
// again, to run a second time, and a capped tenant's place stayed taken
// meanwhile (two minutes after a one-second outage of the queue's
// master). The deadline, the task's lease, still bounds the retry.
func settleContext(ctx context.Context, keys []string) context.Context {
	if !errors.Is(ctx.Err(), context.Canceled) || !settles(keys) {
		return ctx
	}
	d, ok := ctx.Deadline()
	if !ok || !time.Now().Before(d) {
		return ctx
	}
	dctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), d)
	context.AfterFunc(dctx, cancel) // released once the deadline passes
	return dctx
}

// settles reports whether keys are those of one of asynq's scripts that
// take a task out of a queue's active list once its handler returned:
// done, complete, requeue (RDB.Done, MarkAsComplete, Requeue: the active
// list, then the leases), retry and archive (RDB.Retry, Archive: the
// task's key, then the active list and the leases).
func settles(keys []string) bool {
	if len(keys) < 3 {
		return false
	}
	if _, look := dequeues(keys); look {
		return false
	}
	for _, at := range []int{0, 1} {
		if queue, ok := queueOf(keys[at], "active"); ok && keys[at+1] == asynqKeys(queue)+"lease" {
			return true
		}
	}
	return false
}

// markedDone reports whether keys are those of asynq's scripts that take
// a task that succeeded out of the active list (RDB.Done and
// RDB.MarkAsComplete), and if so, the task's queue and ID: the queue's
// active list and leases, then its task key, or its completed set and
// then its task key. Its retry, archive and requeue scripts name the keys
// in another order.
func markedDone(keys []string) (queue, id string, ok bool) {
	if len(keys) < 4 {
		return "", "", false
	}
	if queue, ok = queueOf(keys[0], "active"); !ok || keys[1] != asynqKeys(queue)+"lease" {
		return "", "", false
	}
	task := keys[2]
	if task == asynqKeys(queue)+"completed" {
		task = keys[3]
	}
	if id, ok = strings.CutPrefix(task, asynqKeys(queue)+"t:"); !ok || id == "" {
		return "", "", false
	}
	return queue, id, true
}

// dequeues reports whether keys are those of asynq's script that takes a
// task from a queue's pending list (RDB.Dequeue), and if so, the queue:
// its pending list, paused flag, active list and leases.
func dequeues(keys []string) (queue string, ok bool) {
	if len(keys) != 4 {
		return "", false
	}
	if queue, ok = queueOf(keys[0], "pending"); !ok {
		return "", false
	}
	p := asynqKeys(queue)
	if keys[1] != p+"paused" || keys[2] != p+"active" || keys[3] != p+"lease" {
		return "", false
	}
	return queue, true
}

// asynqKeys is the prefix of asynq's keys of queue, asynq:{<queue>}:
// (asynq/internal/base).
func asynqKeys(queue string) string { return "asynq:{" + queue + "}:" }

// queueOf returns the queue of asynq's key "asynq:{<queue>}:<kind>".
func queueOf(key, kind string) (string, bool) {
	q, ok := strings.CutPrefix(key, "asynq:{")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(q, "}:"+kind)
}
