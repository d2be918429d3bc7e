package enqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
)

// ParkedUntil is the asynq.ProcessAt of a task that waits its turn in a
// dispatched queue (dispatch.ParkedUntil): asynq keeps it in its scheduled
// set, durably and visible to its tools, and a worker with a Gate moves it
// to pending at its turn.
var ParkedUntil = dispatch.ParkedUntil

// defaultQueue is asynq's queue for tasks enqueued without asynq.Queue.
const defaultQueue = "default"

// admit decides p: through the dispatcher when p's queue is dispatched for
// its tenant (a capped tenant, or a fair queue), else through the gate
// alone. The ticket says what the dispatcher holds for p, for abandon.
func (c *Client) admit(cc *callContext, p prepared) (admission.Decision, dispatch.Ticket, error) {
	tk := dispatch.Ticket{}
	if q, err := c.gate.Quota(cc, p.tenant); err == nil {
		keys, err := c.keyQuotas(cc, p)
		if err != nil {
			return admission.Decision{}, tk, err
		}
		task := dispatch.Task{Queue: p.sched.queue, Tenant: p.tenant, ID: p.id,
			NotBefore: notBefore(p.sched.at), UniqueTTL: p.sched.unique, Deadline: p.sched.deadline,
			Priority: p.sched.priority, Keys: keys}
		tk, tried, err := c.parkWriting(cc, p, task, q)
		if !tried {
			tk, err = c.disp.Park(cc, task, q)
			if err != nil {
				err = parkFailed(cc, p, err)
			}
		}
		if err != nil {
			return admission.Decision{}, tk, err
		}
		switch tk.Verdict {
		case dispatch.Wait:
			if p.sched.group != "" {
				return admission.Decision{}, tk, c.abandon(cc, p, tk, unwritten, errors.New("enqueue: a task with asynq.Group cannot wait in a dispatched queue"))
			}
			return admission.Decision{Tenant: p.tenant, Outcome: admission.Parked, ID: p.id, Now: tk.Now, At: tk.Now}, tk, nil
		case dispatch.Full:
			at := tk.Now.Add(max(q.Window/time.Duration(q.Limit), time.Second))
			return admission.Decision{Tenant: p.tenant, Outcome: admission.Rejected, Now: tk.Now, At: at, Full: true}, tk, nil
		}
	}
	ds, err := c.gate.AdmitBatchAt(cc, p.tenant, []string{p.id}, notBefore(p.sched.at))
	if err != nil {
		return admission.Decision{}, tk, c.abandon(cc, p, tk, unwritten, err)
	}
	if ds[0].Outcome == admission.Rejected {
		_ = c.abandon(cc, p, tk, unwritten, nil) // the rejection is the caller's answer
	}
	return ds[0], tk, nil
}

// keyQuotas returns p's keys, in order, each with its quota as the gate
// reads it now: a key without one caps and pauses nothing. A quota that
// cannot be read fails the task as the dispatcher's failures do, with an
// error that matches admission.ErrUnavailable, unless the stored quota is
// itself invalid (admission.ErrInvalidQuota).
func (c *Client) keyQuotas(ctx context.Context, p prepared) ([]dispatch.Key, error) {
	if len(p.sched.keys) == 0 {
		return nil, nil
	}
	keys := make([]dispatch.Key, len(p.sched.keys))
	for i, k := range p.sched.keys {
		q, _, err := c.gate.KeyQuota(ctx, k) // no quota: the zero Quota
		switch {
		case err == nil:
		case errors.Is(err, admission.ErrUnavailable), errors.Is(err, admission.ErrInvalidQuota):
			return nil, fmt.Errorf("enqueue: tenant %q, task %q: the quota of key %q: %w", p.tenant, p.id, k, err)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("enqueue: tenant %q, task %q: the quota of key %q: %w", p.tenant, p.id, k, withCancel(ctx, err))
		default:
			return nil, fmt.Errorf("%w: enqueue: tenant %q, task %q: the quota of key %q: %w", admission.ErrUnavailable, p.tenant, p.id, k, err)
		}
		keys[i] = dispatch.Key{Name: k, MaxInFlight: q.MaxInFlight, Paused: q.Paused}
	}
	return keys, nil
}

// abandon gives back what the dispatcher holds for task p (tk) whose
// write certainly did not happen (f is unwritten), or that the gate
// refused, and returns err, with the give-back's own error appended as
// text. With err nil, the caller has nothing to report, so a failed
// give-back is logged: the place it leaves lapses on its own (the entry
// is dropped at its turn).
func (c *Client) abandon(ctx context.Context, p prepared, tk dispatch.Ticket, f fate, err error) error {
	if f != unwritten || (tk.Verdict != dispatch.Straight && tk.Verdict != dispatch.Wait) {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if aerr := c.disp.Abandon(rctx, tk); aerr != nil {
		if err == nil {
			c.logger().Warn("admitq: giving back a task's place in its queue failed; it lapses on its own", "queue", p.sched.queue, "tenant", p.tenant, "task_id", p.id, "err", aerr)
			return nil
		}
		return fmt.Errorf("%w (giving back its place failed too: %v)", err, aerr)
	}
	return err
}

// WhyParked says why the parked task info (Decision.Outcome Parked) waits,
// as its queue's dispatcher holds it now: "parked: " and what holds it (the
// tenant at its cap, held by its rate, its turn in a fair queue...), or
// "parked: waits its turn in the queue" when the reading does not say. It
// reads Redis: a few round trips (dispatch.Dispatcher.Locate).
func (c *Client) WhyParked(ctx context.Context, info *asynq.TaskInfo) string {
	if err := c.made(); err != nil {
		return dispatch.ParkedWhy(dispatch.Place{}, err)
	}
	if info == nil {
		return dispatch.ParkedWhy(dispatch.Place{}, errors.New("enqueue: no task"))
	}
	return dispatch.ParkedWhy(c.disp.Locate(ctx, info.Queue, info.ID))
}

// parkFailed is the error of a park that failed with err before its task
// was written: admission.ErrUnavailable's (Redis failed it), but for the
// caller's context that ended (ctx's error, as the gate returns it), a
// gate prefix the dispatcher refuses (dispatch.ErrInvalidPrefix) and a task
// it refuses (dispatch.ErrInvalidTask), which are no outage of Redis.
func parkFailed(ctx context.Context, p prepared, err error) error {
	err = withCancel(ctx, err)
	if ctx.Err() != nil || errors.Is(err, dispatch.ErrInvalidPrefix) || errors.Is(err, dispatch.ErrInvalidTask) {
		return fmt.Errorf("enqueue: tenant %q, task %q: %w", p.tenant, p.id, err)
	}
	return fmt.Errorf("%w: enqueue: tenant %q, task %q: %w", admission.ErrUnavailable, p.tenant, p.id, err)
}
