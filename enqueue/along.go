package enqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
)

// A park with its write. A task that waits its turn in a dispatched queue
// would take two round trips: the dispatcher's park, then asynq's write of
// the task, parked. Enqueue and EnqueueBatch on a Client made by
// NewFromRedis ask asynq to write the task parked first, and its pipelined
// client turns asynq's schedule script call into the park, carrying
// asynq's encoded message (dispatch.Task.Message): when the task waits,
// the park's script writes it as asynq's script would, in one call; when
// it goes straight in, or is refused, nothing is written and asynq's call
// fails, and the call goes on as after a park alone. The task's slot
// header is then the producer's clock at Enqueue, not Redis's at the park.
//
// Tasks with an asynq.Unique lock or an asynq.Group, and a Client made by
// New, park and write in two calls.

// along is one task's park that goes with its write, in its
// callContext while asynq writes the task.
type along struct {
	c     *Client
	task  dispatch.Task
	quota admission.Quota
	// ran: asynq's script call reached write, which set tk and err.
	ran bool
	tk  dispatch.Ticket
	err error
	// What became of the write, once the park ran: for write, or, when
	// the park failed, for Enqueue's settle.
	info *asynq.TaskInfo
	fate fate
	werr error
}

// parkFate is what became of the task of cc's call whose admission
// failed: unwritten, unless its park, with its write, may have run.
func (cc *callContext) parkFate() fate {
	if cc.along == nil {
		return unwritten
	}
	return cc.along.fate
}

type alongKey struct{}

// errNotWritten fails asynq's call when its task did not wait: nothing
// was written, and the call goes on as after a park alone.
var errNotWritten = errors.New("enqueue: the task does not wait: written after admission")

// errNotSchedule fails asynq's call when it is not the write of the
// parked task that the park expects (another asynq version's script):
// nothing was sent, and the Client parks and writes in two calls from then
// on.
var errNotSchedule = errors.New("enqueue: asynq's write is not its schedule script of the task")

// alongOf returns the park that goes with ctx's write, if any that has not
// run yet.
func alongOf(ctx context.Context) *along {
	a, _ := ctx.Value(alongKey{}).(*along)
	if a == nil || a.ran {
		return nil
	}
	return a
}

// writesAlong reports whether ctx's call is a park that writes its task
// (its along has run): its sending is traced as a write's.
func writesAlong(ctx context.Context) bool {
	a, _ := ctx.Value(alongKey{}).(*along)
	return a != nil && a.ran
}

// write parks a's task, with the message of asynq's script call (keys,
// args), and returns the reply asynq's schedule script would have given:
// 1 when the task is written, 0 when a task with its ID exists, an error
// when the task did not wait or the park failed.
func (a *along) write(ctx context.Context, keys []string, args []any) *redis.Cmd {
	a.ran = true
	cmd := redis.NewCmd(ctx, "evalsha")
	msg, ok := scheduleMessage(a.task.Queue, a.task.ID, keys, args)
	if !ok {
		a.c.twoCalls.Store(true)
		a.err = errNotSchedule
		cmd.SetErr(errNotSchedule)
		return cmd
	}
	t := a.task
	t.Message = msg
	a.tk, a.err = a.c.disp.Park(ctx, t, a.quota)
	switch {
	case a.err != nil:
		// parkWriting reads a.err; asynq gets text alone, so that no
		// Redis error in it (NOSCRIPT) sends asynq to a script of its own.
		cmd.SetErr(fmt.Errorf("enqueue: the park failed: %v", a.err))
	case a.tk.Written:
		cmd.SetVal(int64(1))
	case a.tk.Exists:
		cmd.SetVal(int64(0))
	default:
		cmd.SetErr(errNotWritten)
	}
	return cmd
}

// scheduleMessage returns the encoded message of asynq's schedule script
// call (keys, args) of task id in queue, parked: its keys the task's hash
// and the queue's scheduled set, its arguments the message, ParkedUntil in
// Unix seconds and the ID (asynq's RDB.Schedule).
func scheduleMessage(queue, id string, keys []string, args []any) ([]byte, bool) {
	if len(keys) != 2 || len(args) != 3 || keys[0] != taskKey(queue, id) || keys[1] != "asynq:{"+queue+"}:scheduled" {
		return nil, false
	}
	if at, ok := args[1].(int64); !ok || at != ParkedUntil.Unix() {
		return nil, false
	}
	if s, ok := args[2].(string); !ok || s != id {
		return nil, false
	}
	switch m := args[0].(type) {
	case []byte:
		return m, true
	case string:
		return []byte(m), true
	}
	return nil, false
}

// parkWriting parks p's task t, and writes it along when it waits: asynq
// writes the task parked through the Client's pipelined client, which
// parks instead (along.write). It reports false when it did not park:
// the task cannot be written so, or asynq's write is not the script call
// along.write knows. Otherwise the ticket and error are the park's (or,
// when asynq failed before its script call, that failure), and cc's along
// holds the write's outcome for write.
func (c *Client) parkWriting(cc *callContext, p prepared, t dispatch.Task, q admission.Quota) (dispatch.Ticket, bool, error) {
	if c.rdb == nil || p.sched.unique > 0 || p.sched.group != "" || c.twoCalls.Load() {
		return dispatch.Ticket{}, false, nil
	}
	if calls, err := c.disp.Calls(cc, t, q); err != nil || !calls {
		return dispatch.Ticket{}, false, nil // Park answers it: Direct, or the same error
	}
	a := &along{c: c, task: t, quota: q}
	cc.along = a
	info, err := c.asynq.EnqueueContext(cc, c.task(p, append(p.opts, asynq.ProcessAt(ParkedUntil)), time.Now()))
	switch {
	case errors.Is(a.err, errNotSchedule):
		cc.along = nil // nothing was sent
		return dispatch.Ticket{}, false, nil
	case !a.ran:
		// asynq failed before its script call (the SADD of a new queue's
		// name, or ctx ended): nothing of the task was stored.
		cc.along = nil
		return dispatch.Ticket{}, true, parkFailed(cc, p, err)
	case a.err != nil:
		// The park failed. If it may have run, so may the write: that is
		// no failure of admission (Enqueue marks it ambiguous).
		a.fate = c.fateOf(p, &cc.trace, a.err)
		perr := withCancel(cc, a.err)
		switch {
		case a.fate == maybe:
			return dispatch.Ticket{}, true, fmt.Errorf("enqueue: tenant %q, task %q: %w", p.tenant, p.id, perr)
		case cc.trace.oom.Load():
			return dispatch.Ticket{}, true, fmt.Errorf("%w: %w: enqueue: tenant %q, task %q: %w", admission.ErrUnavailable, ErrOutOfMemory, p.tenant, p.id, perr)
		}
		return dispatch.Ticket{}, true, parkFailed(cc, p, a.err)
	case !a.tk.Written && !a.tk.Exists:
		// Nothing written: write does it, and traces its own call.
		cc.along = nil
		cc.trace.sent.Store(false)
		cc.trace.oom.Store(false)
		return a.tk, true, nil
	}
	a.info, a.fate, a.werr = c.wrote(cc, p, admission.Decision{Outcome: admission.Parked}, info, err)
	return a.tk, true, nil
}
