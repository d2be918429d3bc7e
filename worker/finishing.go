package worker

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/enqueue"
)

// finishing tells the dispatcher about every task the Worker finishes: how
// long it ran (its tenant's charge of worker time) and whether it left
// asynq's hands for good, which frees its tenant's place at once and grants
// the next waiting task.
type finishing struct {
	next      asynq.Handler
	disp      finisher
	isFailure func(error) bool // asynq's, as the Worker configured it
}

// finisher is what finishing tells (a *dispatch.Server).
type finisher interface {
	Started(queue, tenant string)
	Finished(queue, tenant, id string, ran time.Duration, done bool, keys ...string)
	Throttled(queue, tenant, id string, ran, hold time.Duration)
	ThrottledKey(queue, tenant, id, key string, ran, hold time.Duration)
}

func (f finishing) ProcessTask(ctx context.Context, t *asynq.Task) (err error) {
	start := time.Now()
	queue, _ := asynq.GetQueueName(ctx)
	tenant := t.Headers()[enqueue.TenantHeader]
	f.disp.Started(queue, tenant)
	defer func() {
		id, _ := asynq.GetTaskID(ctx)
		if te, ok := asThrottled(err); ok && !ends(ctx, err, f.isFailure) {
			hold := max(te.RetryAfter, time.Millisecond)
			switch {
			case !te.onKey():
				// A downstream service throttled the tenant: its waiting
				// tasks wait as long as this one.
				f.disp.Throttled(queue, tenant, id, time.Since(start), hold)
			case carries(t, te.Key):
				// It throttled one of the task's keys: every task of the
				// key waits as long, whatever its tenant.
				f.disp.ThrottledKey(queue, tenant, id, te.Key, time.Since(start), hold)
			default:
				// A key the task does not carry (tenantHandler warns):
				// the task is retried and keeps its place; nothing is
				// held.
				f.disp.Finished(queue, tenant, id, time.Since(start), false)
			}
			return
		}
		f.disp.Finished(queue, tenant, id, time.Since(start), ends(ctx, err, f.isFailure), taskKeys(t)...)
	}()
	return f.next.ProcessTask(ctx, t)
}

// ends reports whether asynq will be done with the task once the handler
// returned err: it completes, is archived or revoked, rather than retried
// (a retried task keeps its tenant's place, so a cap stays hard while it
// waits to run again).
func ends(ctx context.Context, err error, isFailure func(error) bool) bool {
	switch {
	case err == nil, errors.Is(err, asynq.SkipRetry), errors.Is(err, asynq.RevokeTask):
		return true
	case isFailure != nil && !isFailure(err):
		return false // retried without counting
	}
	retried, _ := asynq.GetRetryCount(ctx)
	most, _ := asynq.GetMaxRetry(ctx)
	return retried >= most
}
