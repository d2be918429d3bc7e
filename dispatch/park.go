package dispatch

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/admitq/admitq/admission"
)

// Verdict is what Park decided for a task.
type Verdict int

const (
	// Direct: the queue is not dispatched for this task; enqueue it as
	// without the dispatcher.
	Direct Verdict = iota
	// Straight: the task goes in now. Admit it through the gate and
	// enqueue it; give it back with Abandon if the gate refuses it or the
	// write certainly did not happen.
	Straight
	// Wait: the task waits its turn. Enqueue it with asynq.ProcessAt
	// ParkedUntil; Abandon it if the write certainly did not happen.
	Wait
	// Full: the tenant's waiting backlog is at its MaxParked; nothing was
	// stored.
	Full
)

// Task is what Park needs to know of a task.
type Task struct {
	Queue, Tenant, ID string
	// NotBefore is the task's own asynq.ProcessAt, if any: it is admitted
	// for that time when its turn comes.
	NotBefore time.Time
	// UniqueTTL is its asynq.Unique TTL, if any, which its lock gets when
	// it goes in.
	UniqueTTL time.Duration
}

// Ticket is Park's answer.
type Ticket struct {
	Verdict Verdict
	// Now is the Redis time of the decision.
	Now time.Time
	// Waiting is how many tasks the tenant has waiting in the queue, this
	// one included when it waits.
	Waiting int
	task    Task
	// again: the ID was the dispatcher's already (a retry); Abandon must
	// not give back what the first call holds.
	again bool
}

// Park decides task's way into its queue under tenant quota q (which the
// caller read from the gate). A tenant with no cap in a queue that is not
// fair, or a queue no live worker with a gate serves, is Direct without a
// script call once the queue's mode is known.
func (d *Dispatcher) Park(ctx context.Context, t Task, q admission.Quota) (Ticket, error) {
	if err := d.checkPrefix(); err != nil {
		return Ticket{}, err
	}
	served, fair, err := d.Mode(ctx, t.Queue)
	if err != nil {
		return Ticket{}, err
	}
	if !served && q.MaxInFlight > 0 {
		d.warnDirect(t.Queue, t.Tenant)
	}
	if !served || !fair && q.MaxInFlight == 0 {
		return Ticket{Verdict: Direct, task: t}, nil
	}
	maxParked := q.MaxParked
	if maxParked == 0 {
		maxParked = admission.DefaultMaxParked
	}
	res, err := d.run(ctx, d.scripts.park, t.Queue, t.Tenant, t.ID, µs(t.NotBefore),
		max(t.UniqueTTL.Milliseconds(), 0), q.MaxInFlight, maxParked, q.EffectiveWeight())
	if err != nil {
		return Ticket{}, err
	}
	if len(res) != 3 {
		return Ticket{}, fmt.Errorf("dispatch: fair_park.lua returned %d values, want 3", len(res))
	}
	tk := Ticket{Now: time.UnixMicro(toInt(res[1])), Waiting: int(toInt(res[2])), task: t}
	switch toInt(res[0]) {
	case 0:
		tk.Verdict = Wait
	case 1:
		tk.Verdict = Straight
	case 4:
		tk.Verdict, tk.again = Straight, true
	case 2:
		tk.Verdict = Full
	default:
		tk.Verdict = Direct
		if q.MaxInFlight > 0 {
			d.warnDirect(t.Queue, t.Tenant)
		}
	}
	return tk, nil
}

// Abandon gives back what tk holds: a Straight task's place among those
// in flight, or a Wait task's entry in its tenant's line. Call it when the
// task was certainly not written, or the gate refused a Straight task.
func (d *Dispatcher) Abandon(ctx context.Context, tk Ticket) error {
	t := tk.task
	if tk.again {
		return nil // what the ID holds is the first call's
	}
	switch tk.Verdict {
	case Straight:
		_, err := d.run(ctx, d.scripts.move, t.Queue, 1, "free", t.ID, 0)
		return err
	case Wait:
		e := entry(µs(t.NotBefore), tk.Now.UnixMicro(), max(t.UniqueTTL.Milliseconds(), 0), t.ID)
		if err := d.rdb.LRem(ctx, d.keysFor(t.Queue).p+"w:"+t.Tenant, 1, e).Err(); err != nil {
			return fmt.Errorf("dispatch: queue %q: %w", t.Queue, err)
		}
	}
	return nil
}

// entry is a waiting entry as fair_park.lua writes it.
func entry(nb, parked, uttl int64, id string) string {
	return strconv.FormatInt(nb, 10) + "|" + strconv.FormatInt(parked, 10) + "|" + strconv.FormatInt(uttl, 10) + "|" + id
}
