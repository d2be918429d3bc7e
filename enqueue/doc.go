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
//   - Parked: for a tenant whose quota caps its tasks in flight
//     (MaxInFlight) and has that many in the queues, stores it durably in
//     asynq's scheduled set, in order, until one of the tenant's tasks
//     finishes and a worker with a gate moves it in;
//   - Rejected: enqueues nothing and returns a *RejectedError, which
//     matches ErrRejected and says when to retry (Decision.Full: the
//     tenant's parked backlog is at its MaxParked).
//
// Those are the four outcomes; every Enqueue that returns no other error
// ends in exactly one of them.
//
// The task ID is the gate's entry ID, so a producer that retries after a
// timeout takes no second slot. Every task in asynq's queues holds a slot:
// if the asynq enqueue fails after admission, the slot is given back only
// when no task can hold it (the write was never sent, or asynq refused it
// as a duplicate of another task), and no other call on the Client with
// the task's ID is still in flight. After an ambiguous failure (a timeout,
// a network error, a Redis error reply to the write, ctx done while the
// write was out, asynq.ErrTaskIDConflict) the task may be in the queue, so
// its slot is kept, and IsAmbiguous reports it: retry with the same task
// ID, never a new one. At most one slot per such failure idles until the
// window passes, and the tenant is never admitted past its quota. The
// tenant travels in the task's headers under TenantHeader; package worker
// hands it to handlers.
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
//		// Rejected: try again after rej.RetryAfter().
//	case errors.Is(err, asynq.ErrTaskIDConflict):
//		// The task is in the queue, put there by this call or an earlier one.
//	case enqueue.IsAmbiguous(err):
//		// Perhaps enqueued (a timeout, say): retry with the same task ID,
//		// which takes no second slot.
//	case err != nil:
//		// Not enqueued: the caller still holds the task.
//	default:
//		// Admitted, deferred or parked: the task is in asynq.
//		log.Printf("task %s %s, runs at %v", info.ID, d.Outcome, info.NextProcessAt)
//	}
package enqueue
