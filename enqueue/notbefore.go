package enqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/admitq/admitq/admission"
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
// no time of their own). ds[j] is ps[j]'s decision, unless errs[j] says
// why it was not decided: a run whose gate call failed after an earlier
// run's succeeded, and every run after it, are not admitted. err, with
// nothing admitted, is the first run's failure.
func (c *Client) admitAll(ctx context.Context, tenant string, ps []prepared, refs []admission.Ref) (ds []admission.Decision, errs []error, err error) {
	ds = make([]admission.Decision, 0, len(ps))
	errs = make([]error, len(ps))
	for lo := 0; lo < len(ps); {
		nb := notBefore(ps[lo].sched.at)
		hi := lo + 1
		for hi < len(ps) && notBefore(ps[hi].sched.at).Equal(nb) {
			hi++
		}
		run, err := c.gate.AdmitTasksAt(ctx, tenant, refs[lo:hi], nb)
		if err == nil && len(run) != hi-lo {
			err = fmt.Errorf("enqueue: the gate returned %d decisions for %d tasks", len(run), hi-lo)
		}
		if err != nil {
			if lo == 0 {
				return nil, nil, err
			}
			for j := lo; j < len(ps); j++ {
				errs[j] = fmt.Errorf("task %d: not admitted: %w", ps[j].index, err)
			}
			return append(ds, make([]admission.Decision, len(ps)-lo)...), errs, nil
		}
		ds = append(ds, run...)
		lo = hi
	}
	return ds, errs, nil
}
