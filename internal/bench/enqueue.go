package bench

import (
	"context"
	"errors"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
)

// enqueueClient is enqueue.Client.Enqueue: the gate, then asynq's Enqueue
// of the admitted or deferred task, under a generated task ID.
type enqueueClient struct {
	c     *enqueue.Client
	gate  *admission.Gate
	queue string
}

// Close stops the gate's background work; the asynq client shares the
// contender's Redis client, which the runner closes.
func (l *enqueueClient) Close() error { return l.gate.Close() }

func (l *enqueueClient) Allow(ctx context.Context, tenant string) (Result, error) {
	_, d, err := l.c.Enqueue(ctx, tenant, asynq.NewTask("admitq-bench", benchPayload), asynq.Queue(l.queue))
	var rej *enqueue.RejectedError
	if errors.As(err, &rej) {
		return Result{Outcome: admission.Rejected, Local: rej.Decision.Local}, nil
	}
	return Result{Outcome: d.Outcome, Local: d.Local}, err
}
