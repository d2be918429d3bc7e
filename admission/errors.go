package admission

import "errors"

var (
	// ErrInvalidTenant is returned for a tenant that is empty, longer than
	// MaxTenantLen bytes, not valid UTF-8 or holds a control character.
	// Nothing is written to Redis.
	ErrInvalidTenant = errors.New("admitq: invalid tenant")

	// ErrInvalidKey is returned for a key name (see KeyQuotas) that breaks
	// the rules of tenant names: empty, longer than MaxKeyLen bytes, not
	// valid UTF-8 or holding a control character. Nothing is written to
	// Redis.
	ErrInvalidKey = errors.New("admitq: invalid key")

	// ErrInvalidQuota is returned for a quota with a field out of range
	// (below its least value, or past MaxLimit, MaxWindow, MaxMaxDelay,
	// MaxInFlightCap or MaxParkedCap), for a Log-mode quota whose log could
	// pass MaxLogEntries, for a key's quota that sets more than MaxInFlight
	// and Paused (Quota.ValidateAsKey), and for a stored quota that cannot
	// be decoded. The error's text names the field and the value. Nothing
	// is written to Redis.
	ErrInvalidQuota = errors.New("admitq: invalid quota")

	// ErrInvalidID is returned for an empty entry ID, or one longer than
	// MaxIDLen bytes.
	ErrInvalidID = errors.New("admitq: invalid entry ID")

	// ErrBatchTooLarge is returned for a batch of more than MaxBatch IDs.
	// Nothing is decided or written.
	ErrBatchTooLarge = errors.New("admitq: batch too large")

	// ErrNoQuota is returned when a tenant has no quota of its own and there
	// is no default quota either.
	ErrNoQuota = errors.New("admitq: no quota")

	// ErrUnavailable wraps the error of a Redis call that failed or timed
	// out, and is returned without a call at all while the breaker is open.
	// Such an error also carries the last network error the client met in
	// the past few seconds (a refused or failed dial, say), because a call
	// that runs out of time would otherwise say only "context deadline
	// exceeded"; errors.Is finds that cause too. Under FailOpen the gate
	// decides locally instead of returning it.
	ErrUnavailable = errors.New("admitq: redis unavailable")
)
