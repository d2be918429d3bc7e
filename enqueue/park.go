package enqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/admitq/admitq/admission"
)

// ParkedUntil is the asynq.ProcessAt of a parked task. A task over its
// tenant's Quota.MaxInFlight is written to asynq's scheduled set for this
// time, so that asynq keeps it as durably as any other task, visible in
// asynqmon and the CLI, while the tenant's FIFO keeps its place. It never
// comes due on its own: a worker (package worker) moves it to pending with
// Inspector.RunTask when it is handed a permit.
var ParkedUntil = time.Date(9999, time.January, 1, 0, 0, 0, 0, time.UTC)

// defaultQueue is asynq's queue for tasks enqueued without asynq.Queue.
const defaultQueue = "default"

// ref names p to the gate's permits: its ID and queue.
func (p prepared) ref() admission.Ref {
	return admission.Ref{ID: p.id, Queue: p.sched.queue}
}

// unpark gives back what d holds in a capped tenant's permits (a permit,
// or a place among its parked tasks) when p's write certainly did not
// happen (f is unwritten), and returns err, with the give-back's own error
// appended as text. What an earlier call with the ID took (Existing) stays.
func (c *Client) unpark(ctx context.Context, p prepared, d admission.Decision, f fate, err error) error {
	if err == nil || f != unwritten || !tookSlot(d) {
		return err
	}
	q, qerr := c.gate.Permits().Quota(ctx, p.tenant)
	if qerr != nil || q.MaxInFlight == 0 {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if _, ferr := c.gate.Permits().Finish(rctx, p.tenant, p.ref()); ferr != nil {
		return fmt.Errorf("%w (giving back its permit failed too: %v)", err, ferr)
	}
	return err
}
