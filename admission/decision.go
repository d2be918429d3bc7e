package admission

import (
	"strconv"
	"time"
)

// Outcome is what the gate decided for one request. Its zero value,
// NoOutcome, is none of the four: a Decision returned with an error has
// it, so a failed call never reads as admitted.
type Outcome int

const (
	// NoOutcome is the zero Outcome: no decision was made (the call
	// returned an error, or the Decision was never filled in). Its String
	// is "none".
	NoOutcome Outcome = iota
	// Admitted means a slot was free now: the work may start at once.
	Admitted
	// Deferred means the window is full: the request holds the next free
	// slot, Decision.At, and must not start before it.
	Deferred
	// Rejected means even the next free slot is further ahead than the
	// quota's MaxDelay, or (Decision.Full) the tenant's parked backlog is
	// at its MaxParked. Nothing was recorded; Decision.At says when a retry
	// could succeed.
	Rejected
	// Parked means the task waits its turn in a dispatched queue (package
	// dispatch): its tenant is at Quota.MaxInFlight, has older tasks
	// waiting, or the fair queue is full. It is stored durably, in order,
	// and goes in, charged its slot then, as the tenant's turn comes.
	// Decision.At is when it was parked. Only package enqueue gives it.
	Parked
)

// String returns "admitted", "deferred", "rejected" or "parked", and
// "none" for NoOutcome.
func (o Outcome) String() string {
	switch o {
	case NoOutcome:
		return "none"
	case Admitted:
		return "admitted"
	case Deferred:
		return "deferred"
	case Rejected:
		return "rejected"
	case Parked:
		return "parked"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Decision is the gate's answer for one request. It explains itself: a caller
// can log it, turn it into HTTP headers (Retry-After, remaining) or schedule
// work with it without asking Redis again.
type Decision struct {
	Tenant  string
	Outcome Outcome
	// ID is the entry recorded in the tenant's log, "" when Rejected.
	ID string
	// Now is the Redis server time of the decision (the local clock when
	// Local is set).
	Now time.Time
	// At is Now when Admitted, the reserved slot when Deferred, and the
	// earliest time a retry could be admitted or deferred when Rejected.
	At time.Time
	// Remaining is how many more requests the window admits now, after this
	// one. Below 8 it is exact. From 8 on it is a lower bound: the log is
	// trimmed once every 8 entries and whenever it nears the limit, so it
	// can still count entries that left the window since its last trim.
	// It is NoLimit (-1) for a tenant whose quota has no rate limit.
	Remaining int
	// Existing reports that ID was already in the log: this is its original
	// slot, and no second one was taken.
	Existing bool
	// Full reports a rejection because the tenant's parked backlog is full
	// (Quota.MaxParked), not because of its rate.
	Full bool
	// Local reports a decision made without Redis: by the FailOpen fallback
	// limiter, from the local cache of recent rejections, or for a tenant
	// whose quota has no rate limit (NoLimit). It took no slot in Redis.
	Local bool
}

// Delay returns how long the request must wait: At minus Now, never negative.
func (d Decision) Delay() time.Duration {
	return max(d.At.Sub(d.Now), 0)
}

// setOutcome sets d's outcome from a script's outcome code: admit.lua's 0
// admitted, 1 deferred, 2 rejected, 3 admitted earlier, 4 deferred
// earlier. It reports false for a code it does not know.
func setOutcome(d *Decision, code int64) bool {
	switch code {
	case 0:
		d.Outcome = Admitted
	case 1:
		d.Outcome = Deferred
	case 2:
		d.Outcome, d.ID = Rejected, ""
	case 3:
		d.Outcome, d.Existing = Admitted, true
	case 4:
		d.Outcome, d.Existing = Deferred, true
	default:
		return false
	}
	return true
}
