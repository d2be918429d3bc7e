// Package worker runs asynq servers that process tasks enqueued through
// admitq's enqueue package.
//
// A Worker is an asynq.Server with these additions and admitq's defaults:
//
//   - Tenant(ctx) tells a handler which tenant its task belongs to. enqueue.Client
//     stamps the tenant into the task header enqueue.TenantHeader; the Worker
//     reads it back.
//   - A panic in a handler becomes a *PanicError that names the tenant and the
//     task type, so a log line or error report says whose task broke.
//   - A handler returns Throttled(d) when a downstream service throttles the
//     tenant. The task is retried after d without counting as a failure: its
//     retry budget and the queue's failure stats are untouched. In a
//     dispatched queue (Config.Gate) the tenant's waiting tasks are held for
//     d too. ThrottledKey(key, d) does the same for one of the task's
//     concurrency keys (enqueue.Keys, read back with Keys(ctx)): every
//     waiting task carrying the key is held for d, whatever its tenant.
//   - FirstStart(ctx) tells a task's first start from its reruns, including
//     those after a throttled retry or a shutdown, which asynq's retry count
//     does not show.
//
// Deferred tasks are scheduled by the producer at whole-second slots, so the
// Worker checks for due scheduled and retry tasks every second
// (DefaultDelayedTaskCheckInterval) instead of asynq's five.
//
// A Worker with a Gate hands off with its dispatcher through the Redis
// client it gives asynq, which hears two of asynq's own scripts. When asynq
// has marked a capped tenant's task done, the worker waits (at most 5 ms)
// until the tenant's next task is in at the front of the queue, and takes
// it: the cap counts a task until asynq marks it done, and another
// tenant's task would otherwise take the slot. When its look into its one
// queue finds it empty while the dispatcher expects to move tasks in, it
// looks again as soon as they are in rather than sleeping its
// TaskCheckInterval (dispatch.Server.Done and AwaitMove).
//
// Such a worker on one queue also takes tasks ahead: asynq takes one task
// a look, one look after another, and a look here takes one for each free
// slot in one script and hands asynq the rest at its next looks, without
// Redis. A slot counts free once asynq has marked its task done (or to be
// retried), as asynq frees it then, so a task taken ahead waits only for
// asynq's loop to come round. It is in asynq's active list meanwhile,
// leased as asynq leases it: the Inspector shows it active, and cancelling
// it there does nothing, as for a task asynq has just taken. One that
// waits 100 to 200 ms, or is still waiting when the worker stops, goes
// back to the end of the pending list that asynq takes from. The look
// after a hand-off to a capped tenant's slot takes from Redis first.
//
// A worker program:
//
//	w := worker.New(asynq.RedisClientOpt{Addr: "localhost:6379"}, worker.Config{
//		Concurrency: 20,
//		Logger:      logger,
//	})
//	err := w.Run(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
//		resp, err := billing.Charge(ctx, worker.Tenant(ctx), t.Payload())
//		if err != nil {
//			return err
//		}
//		if resp.StatusCode == http.StatusTooManyRequests {
//			return worker.Throttled(resp.RetryAfter)
//		}
//		if resp.StatusCode == http.StatusServiceUnavailable {
//			// The API is overloaded for everyone: hold every task of its key.
//			return worker.ThrottledKey("api:billing", resp.RetryAfter)
//		}
//		return nil
//	}))
//
// Run blocks until SIGINT or SIGTERM and then shuts down gracefully. Programs
// that manage their own lifetime call Start and Shutdown instead.
package worker
