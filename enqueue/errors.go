package enqueue

import (
	"errors"
	"fmt"
	"time"

	"github.com/admitq/admitq/admission"
)

// ErrRejected is matched, through errors.Is, by every *RejectedError: the
// tenant's next free slot was further ahead than its quota's MaxDelay, so
// nothing was enqueued.
var ErrRejected = errors.New("enqueue: rejected")

// ErrInvalidOption is matched, through errors.Is, by the error for a task
// whose options Enqueue refuses before anything is written: a blank
// asynq.Queue, TaskID or Group, an asynq.Unique TTL under a second (which
// asynq would refuse), a Keys option with a bad key name (the error matches
// admission.ErrInvalidKey too) or more than MaxKeys distinct keys, and a
// Priority outside MinPriority to MaxPriority. The error names the option.
var ErrInvalidOption = errors.New("enqueue: invalid option")

// ErrOutOfMemory is matched, through errors.Is, by an Enqueue error whose
// task asynq's Redis refused for want of memory (maxmemory, noeviction):
// nothing was written and the task's slot went back, so the caller may
// try again later. Only a Client made by NewFromRedis can tell.
var ErrOutOfMemory = errors.New("enqueue: Redis is out of memory, nothing was written")

// RejectedError is the error Enqueue returns, and EnqueueBatch puts in a
// Result, for a task the gate rejected. Nothing was enqueued and no slot was
// taken: the caller still holds the task and may try again after
// RetryAfter. Use errors.As to get at the Decision.
type RejectedError struct {
	// Decision is the gate's rejection. Its At is the earliest time a retry
	// could be admitted or deferred.
	Decision admission.Decision
}

// Error names the tenant and says when a retry could succeed.
func (e *RejectedError) Error() string {
	if e == nil {
		return "enqueue: rejected (a nil *RejectedError)"
	}
	if e.Decision.Full {
		return fmt.Sprintf("enqueue: tenant %q rejected, its parked backlog is full (quota max parked): retry after %v (at %s)",
			e.Decision.Tenant, e.RetryAfter(), e.Decision.At.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("enqueue: tenant %q rejected, over quota: retry after %v (at %s)",
		e.Decision.Tenant, e.RetryAfter(), e.Decision.At.UTC().Format(time.RFC3339Nano))
}

// Is reports whether target is ErrRejected.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// RetryAfter returns how long to wait before a retry could be admitted or
// deferred: Decision.At minus Decision.Now, never negative. It is measured
// on the Redis clock from the moment of the decision, so it is exact at
// once and does not depend on the local clock. A nil *RejectedError says 0.
func (e *RejectedError) RetryAfter() time.Duration {
	if e == nil {
		return 0
	}
	return e.Decision.Delay()
}

// IsAmbiguous reports whether err, from Enqueue or in a Result of
// EnqueueBatch, leaves the task's fate open: the write may have reached
// Redis, and the task may be in asynq's queue. Its slot was kept for it.
// Retry with the same task ID, which takes no second slot and gets
// asynq.ErrTaskIDConflict if the task is there; do not enqueue the task
// again under a new ID, which could run it twice.
//
// These failures are ambiguous: asynq.ErrTaskIDConflict on an ID of the
// caller's (the task with the ID is in the queue, written by this call,
// which go-redis retried, or by another with the ID; on an ID Enqueue
// made, only this call's own first attempt can hold it, and a Client made
// by NewFromRedis reads the task back, while ctx lasts and for at most a
// second, and returns it as enqueued); asynq.ErrDuplicateTask when a task
// with the ID is in the queue (the retry of a write that ran finds its own
// lock); a timeout, a network error or ctx done while the write was out;
// and any Redis error reply to asynq's write, such as LOADING, since it
// may answer a retry of an attempt that ran.
//
// Every other error is definite: the task was not enqueued by this call,
// and the caller still holds it. That covers a rejection (ErrRejected),
// invalid input, the gate's errors (admission.ErrUnavailable among them),
// ctx done before the write was sent, asynq.ErrDuplicateTask for another
// task's lock, and Redis's OOM reply to the write when the task is not in
// asynq (Redis refuses a script for memory only before its first write),
// whose slot goes back. A Client made by New cannot see what its
// asynq.Client sent, so every failure after it called asynq is ambiguous
// but a Redis error reply before the write.
func IsAmbiguous(err error) bool {
	var a *ambiguousError
	return errors.As(err, &a)
}

// ambiguousError marks a failed write after which the task may be in the
// queue.
type ambiguousError struct{ err error }

func (e *ambiguousError) Error() string { return e.err.Error() }
func (e *ambiguousError) Unwrap() error { return e.err }
