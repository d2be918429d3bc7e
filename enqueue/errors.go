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
// once and does not depend on the local clock.
func (e *RejectedError) RetryAfter() time.Duration { return e.Decision.Delay() }
