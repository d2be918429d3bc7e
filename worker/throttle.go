package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// ThrottledError is returned by a handler, usually through Throttled or
// ThrottledKey, when a downstream service is throttling the task's tenant,
// or one of its concurrency keys (Key). The Worker retries the task no
// earlier than RetryAfter from now, and does not count the attempt as a
// failure: the task's retry count and the queue's failed counter stay as
// they were, so a tenant held back downstream never exhausts its retries.
//
// In a dispatched queue (Config.Gate) the Worker also tells the
// dispatcher, which holds for RetryAfter the tenant's waiting tasks (Key
// empty) or every waiting task that carries Key, whatever its tenant; other
// tasks go on.
//
// The handler may wrap it (fmt.Errorf("billing: %w", err)); the Worker finds
// it with errors.As.
//
// Two limits come from asynq, which checks them before it asks whether an
// error is a failure: a task whose retries are already used up (including one
// enqueued with asynq.MaxRetry(0)) is archived even when throttled, and an
// error that also wraps asynq.SkipRetry or asynq.RevokeTask is handled as
// that error says.
type ThrottledError struct {
	// RetryAfter is the least time to wait before the next attempt. Zero or
	// negative means at the next check for delayed tasks
	// (Config.DelayedTaskCheckInterval).
	RetryAfter time.Duration
	// Key is the concurrency key that is throttled (ThrottledKey); empty
	// when it is the tenant (Throttled).
	Key string
	// keyed marks ThrottledKey's error, whose Key may be "" (a key no
	// task carries), from Throttled's.
	keyed bool
}

// onKey reports whether e throttles a key rather than the tenant.
func (e *ThrottledError) onKey() bool { return e.keyed || e.Key != "" }

// Error says that the task is throttled, on which key if any, and for how
// long.
func (e *ThrottledError) Error() string {
	if e == nil {
		return "worker: throttled downstream (a nil *ThrottledError)"
	}
	if e.onKey() {
		return fmt.Sprintf("worker: throttled downstream on key %q, retry after %v", e.Key, e.RetryAfter)
	}
	return fmt.Sprintf("worker: throttled downstream, retry after %v", e.RetryAfter)
}

// Throttled returns a *ThrottledError that makes the Worker retry the task
// after d without counting a failure. Return it from a handler when a
// downstream service answers "slow down" (HTTP 429, Retry-After: d) for this
// task's tenant.
//
// In a dispatched queue (Config.Gate), the tenant's waiting tasks are held
// for d too: a 429 for one task is a 429 for its tenant.
func Throttled(d time.Duration) error {
	return &ThrottledError{RetryAfter: d}
}

// ThrottledKey returns a *ThrottledError with Key key: like Throttled, the
// Worker retries the task after d without counting a failure, and in a
// dispatched queue (Config.Gate) it holds for d every waiting task that
// carries key (enqueue.Keys), whatever its tenant, instead of the tenant's
// tasks. Return it when a downstream service that the key stands for (a
// shared API, say) answers "slow down" for everyone.
//
// key should be one of the task's keys (Keys). For a key the task does not
// carry, "" among them, the task is still retried after d without counting
// a failure, nothing is held, and the Worker logs a warning naming the key,
// once per key.
func ThrottledKey(key string, d time.Duration) error {
	return &ThrottledError{RetryAfter: d, Key: key, keyed: true}
}

// asThrottled finds a *ThrottledError in err.
func asThrottled(err error) (*ThrottledError, bool) {
	var te *ThrottledError
	ok := errors.As(err, &te)
	return te, ok
}

// isFailure returns the asynq.Config.IsFailure the Worker runs with: a
// throttled error is never a failure; anything else is decided by user, or
// is a failure when user is nil (asynq's default).
func isFailure(user func(error) bool) func(error) bool {
	return func(err error) bool {
		var te *ThrottledError
		if errors.As(err, &te) {
			return false
		}
		if user != nil {
			return user(err)
		}
		return err != nil
	}
}

// retryDelay returns the asynq.Config.RetryDelayFunc the Worker runs with: a
// throttled error waits for its RetryAfter; anything else is decided by user,
// or by asynq.DefaultRetryDelayFunc when user is nil.
func retryDelay(user asynq.RetryDelayFunc, now func() time.Time) asynq.RetryDelayFunc {
	if user == nil {
		user = asynq.DefaultRetryDelayFunc
	}
	return func(n int, err error, t *asynq.Task) time.Duration {
		var te *ThrottledError
		if errors.As(err, &te) {
			return throttleDelay(now(), te.RetryAfter)
		}
		return user(n, err, t)
	}
}

// throttleDelay returns the delay to hand asynq so that a task is retried no
// earlier than d after now. asynq stores the retry time as whole Unix seconds,
// rounded down, so now+d would be retried up to a second early; rounding up to
// the next whole second keeps RetryAfter a lower bound, as an HTTP Retry-After
// is. asynq adds the delay to its own, slightly later, clock reading, which
// does not change the second it rounds down to.
func throttleDelay(now time.Time, d time.Duration) time.Duration {
	at := now.Add(max(d, 0))
	up := at.Truncate(time.Second)
	if up.Before(at) {
		up = up.Add(time.Second)
	}
	return up.Sub(now)
}
