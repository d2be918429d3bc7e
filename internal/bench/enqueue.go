package bench

import (
	"context"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
)

// gateEnqueue stands in for enqueue.Client.Enqueue until the enqueue
// package has it: admit on the gate at asynq's one-second granularity, then
// enqueue now or at the deferred slot, and release the slot if the enqueue
// fails.
type gateEnqueue struct {
	g     *admission.Gate
	c     *asynq.Client
	queue string
}

func (l *gateEnqueue) Allow(ctx context.Context, tenant string) (Result, error) {
	d, err := l.g.Admit(ctx, tenant)
	if err != nil || d.Outcome == admission.Rejected {
		return Result{Outcome: d.Outcome, Local: d.Local}, err
	}
	opts := []asynq.Option{asynq.Queue(l.queue)}
	if d.Outcome == admission.Deferred {
		opts = append(opts, asynq.ProcessAt(d.At))
	}
	t := asynq.NewTaskWithHeaders("admitq-bench", benchPayload, map[string]string{"admitq-tenant": tenant})
	if _, err := l.c.EnqueueContext(ctx, t, opts...); err != nil {
		_ = l.g.Release(context.WithoutCancel(ctx), d)
		return Result{}, err
	}
	return Result{Outcome: d.Outcome}, nil
}
