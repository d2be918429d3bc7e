// Package enqueue puts asynq tasks into their queues through an admission
// gate, so that no tenant pushes more than its quota into the worker queues
// in any window, and a noisy tenant's surplus waits in asynq's scheduled set
// instead of in front of every other tenant's work.
//
// For each task, Client.Enqueue asks the gate (package admission) and then:
//
//   - Admitted: enqueues the task to run now;
//   - Deferred: schedules it for its slot, a whole second, since asynq
//     schedules whole seconds;
//   - Rejected: enqueues nothing and returns a *RejectedError, which
//     matches ErrRejected and says when to retry.
//
// The task ID is the gate's entry ID, so a producer that retries after a
// timeout takes no second slot. If the asynq enqueue fails after admission,
// the slot is given back only when nothing can have been written: ctx was
// done before asynq was called, or before its write left in a pipeline,
// asynq returned asynq.ErrDuplicateTask, or Redis refused the call before
// the write. After an ambiguous failure (a
// timeout, a network error, ctx done while asynq waited) the task may be in
// the queue, so its slot is kept: at most one slot per such failure idles
// until the window passes, and the tenant is never admitted past its quota.
// asynq.ErrTaskIDConflict means the task is in the queue, even from a single
// Enqueue: go-redis retries a command that timed out, and finds the task its
// first attempt wrote. The tenant travels in the task's headers under
// TenantHeader; package worker hands it to handlers.
//
// NewFromRedis is the usual way to make a Client: it makes the asynq.Client
// itself, on the Redis of the worker queues, and the task writes of
// concurrent Enqueue calls share Redis pipelines, as the gate's decisions
// do, so that a producer under load pays for the gate's decision about what
// it saves on asynq's round trips. New takes an asynq.Client you made.
//
// Slots are on the Redis clock, while asynq runs scheduled tasks by the
// clocks of producers and workers, so keep those in step with Redis (NTP).
// A producer whose clock runs ahead of Redis by more than a task's delay
// makes asynq enqueue the deferred task at once.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	q := admission.Quota{Limit: 100, Window: time.Minute, MaxDelay: 10 * time.Minute}
//	gate := admission.New(rdb, admission.StaticQuotas{Default: &q})
//	defer gate.Close()
//	client := enqueue.NewFromRedis(rdb, gate)
//
//	info, d, err := client.Enqueue(ctx, "acme", asynq.NewTask("email:send", payload))
//	var rej *enqueue.RejectedError
//	switch {
//	case errors.As(err, &rej):
//		// Over quota: try again after rej.RetryAfter().
//	case errors.Is(err, asynq.ErrTaskIDConflict):
//		// The task is in the queue, put there by this call or an earlier one.
//	case err != nil:
//		// Not enqueued, or (after a timeout) perhaps enqueued: retry with
//		// the same task ID, which takes no second slot.
//	default:
//		log.Printf("task %s %s, runs at %v", info.ID, d.Outcome, info.NextProcessAt)
//	}
package enqueue
