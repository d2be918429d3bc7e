// Package enqueue puts asynq tasks into their queues through an admission
// gate, so that no tenant pushes more than its quota into the worker queues
// in any window, and a noisy tenant's surplus waits in asynq's scheduled set
// instead of in front of every other tenant's work.
//
// For each task, Client.Enqueue asks the gate (package admission), or in a
// queue that package dispatch serves, the dispatcher first, and then:
//
//   - Admitted: enqueues the task to run now;
//   - Deferred: schedules it for its slot, a whole second, since asynq
//     schedules whole seconds; it never becomes pending before it;
//   - Parked: in a dispatched queue (a worker with a gate serves it), the
//     tenant is at its cap (Quota.MaxInFlight), paused or throttled, has
//     tasks waiting already, a key the task carries (Keys) is at its cap,
//     paused or throttled, or the fair queue is full: the task is stored
//     durably in asynq's
//     scheduled set until ParkedUntil, in its tenant's line, and a worker
//     moves it in at its turn, charged its slot then (and not before its
//     own ProcessAt);
//   - Rejected: enqueues nothing and returns a *RejectedError, which
//     matches ErrRejected and says when to retry (Decision.Full: the
//     tenant's parked backlog is at its MaxParked).
//
// Those are the four outcomes; every Enqueue that returns no other error
// ends in exactly one of them.
//
// Task IDs. The task ID is the gate's entry ID. It comes from an
// asynq.TaskID option, given to Enqueue or to asynq.NewTask (Enqueue's
// wins, as in asynq); without one, Enqueue makes an ID. Enqueueing the same
// ID again while it is in the window takes no second slot: a retry after a
// timeout keeps the original slot, and gets asynq.ErrTaskIDConflict if the
// first attempt did reach the queue. asynq task IDs are unique per queue,
// across tenants, while each tenant's log is its own: where tenants pick
// IDs (say, from idempotency keys), put the tenant in the ID.
//
// Keys and priority. Keys("api:stripe", ...) makes a task count against
// each key's quota in its queue as well as its tenant's: a key's
// MaxInFlight caps its tasks pending or active across all tenants, and
// Paused holds them (admission.RedisQuotas.SetKey). Priority(p) orders a
// task among its tenant's waiting tasks, higher first, first in, first out
// within a priority, and never moves the tenant ahead of another. Both act
// in a dispatched queue, where a task waits (Parked) until its tenant and
// every key it carries let it in, and a task held by a full, paused or
// throttled key holds back no task that does not carry it; in a queue that
// no worker with a gate serves the task goes in as it would without them,
// and the producer logs that once. The enqueued task carries its keys in
// the header KeysHeader, for worker.Keys and worker.ThrottledKey. A bad
// key, more than MaxKeys keys or a priority out of range is refused with
// ErrInvalidOption, and nothing is written:
//
//	_, _, err := client.Enqueue(ctx, "acme", task, enqueue.Keys("api:stripe"), enqueue.Priority(10))
//
// Scheduled tasks. A task with its own asynq.ProcessAt or ProcessIn is
// charged for the time it will run, not for now (Gate.AdmitAt): its slot
// is the first free one from that time (to the second, as asynq runs it)
// and after every slot the tenant was given before, MaxDelay counts from
// that time, and it runs at its slot. Tasks enqueued after it queue behind
// it: a task scheduled far ahead holds the tenant's later tasks back until
// its slot, and rejects those it would hold back by more than MaxDelay.
//
// Failures. Every task in asynq's queues holds a slot. If the asynq
// enqueue fails after admission, the slot is given back only when no task
// can hold it: the write certainly did not happen (ctx was done before it
// was sent, asynq refused it as a duplicate of another task's asynq.Unique
// lock, or Redis refused it for want of memory, ErrOutOfMemory), and no
// other call on the Client with the task's ID is still in flight. After any
// other failure (a timeout, a network error, ctx done while the write was
// out) the task may be in the queue, so its slot is kept, and IsAmbiguous
// reports it: retry with the same task ID, never a new one. At most one
// slot per such failure idles until the window passes, and the tenant is
// never admitted past its quota. Should ctx end while the gate decides,
// the slot of an ID Enqueue made goes back once the decision arrives; a
// caller's own ID keeps it, for a retry with that ID. A Client made by New,
// which cannot see what its asynq.Client sends, treats every failure after
// asynq was called as ambiguous but a Redis error reply before the write.
// The tenant travels in the task's headers under TenantHeader, and its
// keys under KeysHeader; package worker hands them to handlers.
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
