package enqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
)

// notBefore is when asynq will first run a task the caller scheduled for
// at (asynq.ProcessAt or ProcessIn): asynq keeps a scheduled task under its
// time truncated to the second and runs it once the clock reaches that
// second. The gate charges the task for that moment, not for the enqueue.
// Zero when the caller scheduled nothing.
func notBefore(at time.Time) time.Time {
	return at.Truncate(time.Second)
}

// admitAll decides ps, in order, in one gate round trip for each run of
// tasks that start at the same time (most batches are one run: tasks with
// no time of their own), or, where a task's queue is dispatched for the
// tenant, task by task through the dispatcher, in ccs[j], the context of
// ps[j]'s admission and write (its park may write it: parkWriting). ds[j]
// is ps[j]'s decision and tks[j] its ticket, unless errs[j] says why it
// was not decided: a task whose admission failed after an earlier one's
// succeeded, and every task after it, are not admitted; a task whose park
// failed after it may have written it keeps its own failure. err, with
// nothing admitted, is the first task's failure.
func (c *Client) admitAll(ctx context.Context, tenant string, ps []prepared, ccs []*callContext) (ds []admission.Decision, tks []dispatch.Ticket, errs []error, err error) {
	tks = make([]dispatch.Ticket, len(ps))
	errs = make([]error, len(ps))
	if c.dispatched(ctx, tenant, ps) {
		ds = make([]admission.Decision, len(ps))
		for j, p := range ps {
			ds[j], tks[j], err = c.admit(ccs[j], p)
			if err == nil {
				continue
			}
			written := ccs[j].parkFate() != unwritten // its park may have written it
			if j == 0 && !written {
				return nil, nil, nil, err
			}
			for k := j; k < len(ps); k++ {
				switch {
				case !written:
					errs[k] = fmt.Errorf("task %d: not admitted: %w", ps[k].index, err)
				case k == j:
					errs[k] = fmt.Errorf("task %d: %w", p.index, err)
				default:
					// Only task j may be there: those after it were not
					// tried, and did not meet its failure.
					errs[k] = fmt.Errorf("%w: task %d: not admitted: task %d's park failed: %v", admission.ErrUnavailable, ps[k].index, p.index, err)
				}
			}
			return ds, tks, errs, nil
		}
		return ds, tks, errs, nil
	}
	ds = make([]admission.Decision, 0, len(ps))
	for lo := 0; lo < len(ps); {
		nb := notBefore(ps[lo].sched.at)
		hi := lo + 1
		for hi < len(ps) && notBefore(ps[hi].sched.at).Equal(nb) {
			hi++
		}
		ids := make([]string, hi-lo)
		for j := range ids {
			ids[j] = ps[lo+j].id
		}
		run, err := c.gate.AdmitBatchAt(ctx, tenant, ids, nb)
		if err == nil && len(run) != hi-lo {
			err = fmt.Errorf("enqueue: the gate returned %d decisions for %d tasks", len(run), hi-lo)
		}
		if err != nil {
			if lo == 0 {
				return nil, nil, nil, err
			}
			for j := lo; j < len(ps); j++ {
				errs[j] = fmt.Errorf("task %d: not admitted: %w", ps[j].index, err)
			}
			return append(ds, make([]admission.Decision, len(ps)-lo)...), tks, errs, nil
		}
		ds = append(ds, run...)
		lo = hi
	}
	return ds, tks, errs, nil
}

// dispatched reports whether a queue of ps is dispatched for tenant: a
// worker with a gate serves it, and it is fair, the tenant is capped or
// paused, or the task carries keys. A task with keys or a priority goes
// through the dispatcher whatever its queue, so that in a queue no worker
// with a gate serves the dispatcher logs that they hold nothing there.
func (c *Client) dispatched(ctx context.Context, tenant string, ps []prepared) bool {
	q, err := c.gate.Quota(ctx, tenant)
	if err != nil {
		return false
	}
	held := q.MaxInFlight > 0 || q.Paused
	for _, p := range ps {
		if len(p.sched.keys) > 0 || p.sched.priority != 0 {
			return true
		}
		served, fair, err := c.disp.Mode(ctx, p.sched.queue)
		if err != nil || served && (fair || held) {
			return true
		}
	}
	return false
}
