package worker

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/lua"
)

// takeAhead answers asynq's looks into the one queue of a worker with a
// gate (RDB.Dequeue). asynq takes one task a look, one look after another:
// a worker draining short tasks waits for its looks about as long as it
// runs tasks, the more so while Redis runs the dispatcher's turns. A look
// here takes a task for each of the worker's free slots (take.lua, which
// does to each what asynq's look does to one), hands asynq the first and
// the next looks the rest, at once and without Redis.
//
// A slot counts as free once asynq's script that takes its task out of the
// active list has run, as asynq frees it then, and a look counts the slot
// it looks with free. A task taken ahead waits only for asynq's loop to
// come round; one that waits longer than aheadFor (a slot did not free as
// counted) goes back to the end of the pending list that asynq takes from
// (give_back.lua), as does every task taken ahead when the Worker stops.
//
// A task the dispatcher moves in at the front for a capped tenant's slot
// (dispatch.Server.Done) is for the next free slot: the look after the
// hand-off takes from Redis first, and what it takes goes before the tasks
// taken ahead; when an earlier hand-off's look took tasks from the front
// with its own, the next of those comes first.
type takeAhead struct {
	rdb         redis.UniversalClient
	queue       string
	keys        string // asynqKeys(queue)
	concurrency int
	take, back  *redis.Script

	mu sync.Mutex
	// held are the task keys handed to asynq whose slots are not yet free,
	// with when each was handed.
	held map[string]time.Time
	// ahead are the tasks taken ahead, the next to hand out first.
	ahead []taken
	// fronts counts the hand-offs whose task the looks have yet to take.
	fronts int
}

// taken is a task that take.lua took: its ID, asynq's message, and when;
// front says a look after a hand-off took it from the front, behind the
// task it handed asynq.
type taken struct {
	id, msg string
	at      time.Time
	front   bool
}

const (
	// aheadFor is the longest a task taken ahead waits for a look before
	// it goes back.
	aheadFor = 100 * time.Millisecond
	// mostAhead is the most tasks one look takes.
	mostAhead = 16
	// giveBackTimeout bounds a giving back.
	giveBackTimeout = 5 * time.Second
)

func newTakeAhead(rdb redis.UniversalClient, queue string, concurrency int) *takeAhead {
	return &takeAhead{rdb: rdb, queue: queue, keys: asynqKeys(queue), concurrency: concurrency, take: lua.Take(), back: lua.GiveBack(),
		held: map[string]time.Time{}}
}

// look answers one of asynq's looks into queue, whose script asynq runs
// (run) with keys and args (RDB.Dequeue's: the leases' expiry, the task
// key prefix): with a task taken ahead, else with take.lua for the free
// slots. Its reply is asynq's: the task's message, or redis.Nil when the
// queue is empty or paused. A look it does not know (another queue, other
// arguments) is asynq's own.
func (a *takeAhead) look(ctx context.Context, queue string, keys []string, args []any, run func() *redis.Cmd) *redis.Cmd {
	if queue != a.queue || len(args) != 2 {
		return run()
	}
	cmd := redis.NewCmd(ctx)
	n, front, next, ok := a.next()
	if ok {
		cmd.SetVal(next.msg)
		return cmd
	}
	res, err := a.take.Run(ctx, a.rdb, keys, args[0], args[1], n).Slice()
	if err != nil {
		cmd.SetErr(err)
		return cmd
	}
	ts := make([]taken, 0, len(res)/2)
	now := time.Now()
	for i := 0; i+1 < len(res); i += 2 {
		id, _ := res[i].(string)
		msg, _ := res[i+1].(string)
		ts = append(ts, taken{id: id, msg: msg, at: now})
	}
	if next, ok := a.handed(ts, front); ok {
		cmd.SetVal(next.msg)
	} else {
		cmd.SetErr(redis.Nil) // asynq's answer for an empty or paused queue
	}
	return cmd
}

// next hands out the next task taken ahead (ok), or says how many tasks a
// look takes: one for each free slot that no task taken ahead waits for,
// and at least the one asynq looks with. front says the look follows a
// hand-off.
func (a *takeAhead) next() (n int, front bool, t taken, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fronts > 0 {
		a.fronts--
		front = true
	}
	if len(a.ahead) > 0 && (!front || a.ahead[0].front) {
		// After a hand-off, a task that the look after an earlier one
		// took from the front is the front: the task this hand-off moved
		// in, or one that was ahead of it.
		t, a.ahead = a.ahead[0], a.ahead[1:]
		a.hold(t.id)
		return 0, false, t, true
	}
	a.forgetLost()
	return max(min(a.concurrency-len(a.held)-len(a.ahead), mostAhead), 1), front, taken{}, false
}

// handed takes in ts, what a look took (in the order taken), and returns
// the task to hand asynq: the first of ts, the rest kept for the next
// looks (before the tasks taken ahead when the look follows a hand-off);
// or, when the look took none, the next task taken ahead, if any, for the
// hand-offs' tasks were taken already.
func (a *takeAhead) handed(ts []taken, front bool) (taken, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case len(ts) == 0:
		// The pending list is empty: every task moved in at the front
		// before the hand-offs counted was taken already.
		a.fronts = 0
		if len(a.ahead) == 0 {
			return taken{}, false
		}
		ts, a.ahead = a.ahead[:1], a.ahead[1:]
	case front:
		for i := range ts[1:] {
			ts[1+i].front = true
		}
		a.ahead = append(ts[1:len(ts):len(ts)], a.ahead...)
	default:
		a.ahead = append(a.ahead, ts[1:]...)
	}
	a.hold(ts[0].id)
	return ts[0], true
}

// hold counts task id's slot as held. Call it with mu held.
func (a *takeAhead) hold(id string) {
	a.held[a.keys+"t:"+id] = time.Now()
}

// forgetLost drops the oldest held slots while they number the worker's
// concurrency or more. asynq looks only with a slot free, so such a count
// is off: it holds a task whose freeing script never came through the
// client (asynq let its lease run out, or could not read its message).
// Were the one dropped still running, a look would take one task too many,
// which waits for the next slot or goes back. Call it with mu held.
func (a *takeAhead) forgetLost() {
	for len(a.held) >= a.concurrency {
		oldest := slices.MinFunc(slices.Collect(maps.Keys(a.held)), func(x, y string) int {
			return a.held[x].Compare(a.held[y])
		})
		delete(a.held, oldest)
	}
}

// front notes a hand-off: the dispatcher moved a task in at the front for
// the slot asynq frees next.
func (a *takeAhead) front() {
	a.mu.Lock()
	a.fronts++
	a.mu.Unlock()
}

// freed counts the slot of a task as free when keys, those of one of
// asynq's scripts that ran, name it: the script after the look that names
// the task (done, retry, archive or requeue) takes it out of the active
// list, and asynq frees its slot then.
func (a *takeAhead) freed(keys []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.held) == 0 {
		return
	}
	for _, k := range keys {
		delete(a.held, k)
	}
}

// giveBack puts back the tasks taken ahead before cutoff (all of them when
// cutoff is zero). Those it could not put back (Redis did not answer) are
// taken ahead again, for the next sweep: they are still in asynq's active
// list, and give_back.lua puts back only a task that is.
func (a *takeAhead) giveBack(cutoff time.Time) error {
	a.mu.Lock()
	var stale, kept []taken
	for _, t := range a.ahead {
		if cutoff.IsZero() || t.at.Before(cutoff) {
			stale = append(stale, t)
		} else {
			kept = append(kept, t)
		}
	}
	a.ahead = kept
	a.mu.Unlock()
	if len(stale) == 0 {
		return nil
	}
	p := a.keys
	args := []any{p + "t:", strconv.FormatInt(time.Now().UnixNano(), 10)}
	for i := len(stale) - 1; i >= 0; i-- {
		args = append(args, stale[i].id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	err := a.back.Run(ctx, a.rdb, []string{p + "pending", p + "active", p + "lease"}, args...).Err()
	if err != nil {
		a.mu.Lock()
		a.ahead = append(a.ahead, stale...)
		a.mu.Unlock()
	}
	return err
}

// sweep gives back, every aheadFor, the tasks taken ahead that waited
// longer, until stop closes; it closes swept when it returns.
func (a *takeAhead) sweep(stop <-chan struct{}, swept chan<- struct{}, log *slog.Logger) {
	defer close(swept)
	t := time.NewTicker(aheadFor)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			if err := a.giveBack(now.Add(-aheadFor)); err != nil {
				log.Warn("worker: putting back tasks taken ahead failed; trying again", "queue", a.queue, "err", err)
			}
		}
	}
}

// giveBackAll gives back every task taken ahead: asynq looks no more.
// Tasks it cannot put back stay in asynq's active list until their lease
// ends; asynq's recoverer then retries them, as it retries the tasks of a
// worker that died.
func (a *takeAhead) giveBackAll(log *slog.Logger) {
	if err := a.giveBack(time.Time{}); err != nil {
		log.Warn("worker: putting back tasks taken ahead failed; asynq retries them when their lease ends", "queue", a.queue, "err", err)
	}
}
