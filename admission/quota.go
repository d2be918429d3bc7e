package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
)

// Quota is a tenant's admission limit: at most Limit admissions in any
// interval of length Window. A request that finds the window full is
// deferred to its slot if that slot is at most MaxDelay ahead, and rejected
// otherwise.
//
// A Quota with Limit NoLimit has no rate limit: every request is admitted,
// by the gate alone, without a Redis call (see NoLimit), and the quota
// only caps (MaxInFlight, MaxParked), weighs (Weight) or pauses (Paused)
// the tenant's tasks in a dispatched queue.
type Quota struct {
	// Limit is the number of admissions allowed in any Window; 1 to
	// MaxLimit, or NoLimit for no rate limit. In Log mode, Limit × (1 +
	// MaxDelay/Window) is at most MaxLogEntries.
	Limit int
	// Window is the length of the sliding window; 1ms to MaxWindow. With
	// NoLimit it is ignored, and may be 0 (up to MaxWindow).
	Window time.Duration
	// MaxDelay is how far ahead a request that finds the window full may be
	// deferred, up to MaxMaxDelay. 0 means never defer: such a request is
	// rejected.
	MaxDelay time.Duration
	// Mode chooses how the window is kept: Log (the zero value) or Counter.
	Mode Mode
	// MaxInFlight caps the tenant's tasks in each worker queue (pending or
	// active) at once, where a worker with a gate serves the queue (package
	// dispatch); a task over the cap is Parked and goes in, in order, as the
	// tenant's own tasks finish. 0 means no cap. Either Mode: the
	// dispatcher counts the tasks by task ID itself. (In Counter mode a
	// grant admitted twice, after its mover died or the gate's answer was
	// lost, takes a second count, which idles until its window passes.)
	MaxInFlight int
	// MaxParked bounds how many tasks the tenant may have parked in one
	// dispatched queue (over its cap, or waiting its turn in a fair queue);
	// a task that finds the backlog full is rejected. 0 means
	// DefaultMaxParked.
	MaxParked int
	// Weight is the tenant's share of a fair queue's worker time under
	// contention, relative to the other tenants waiting there: a tenant of
	// weight 3 gets three times the worker time of one of weight 1. 0 means
	// 1. Only fair queues (worker.Config.Fair) read it.
	Weight float64
	// Paused holds the tenant's tasks (a key's, for a key quota): none goes
	// into a dispatched queue until Paused is false again. Running tasks
	// finish; new ones are Parked, in order, within MaxParked, and go in,
	// in order, once resumed. The gate's own decisions ignore it: package
	// dispatch applies it.
	Paused bool
}

// NoLimit is a Quota.Limit that means no rate limit: the gate admits every
// request at once, with no Redis call and nothing recorded, so Window,
// MaxDelay and Mode are ignored. Such a decision is Admitted and Local, its
// ID is the one asked for (or a generated one), At is Now (the local
// clock), and Remaining is NoLimit (-1): no count applies. Releasing it is
// a no-op. Caps, weights and pauses still apply where the tenant's tasks
// are dispatched.
const NoLimit = -1

// Unlimited reports whether q has no rate limit (Limit is NoLimit).
func (q Quota) Unlimited() bool { return q.Limit == NoLimit }

// Upper bounds on a Quota's fields. They keep every number the scripts
// compute exact (Redis runs Lua on doubles, exact to 2^53) and free of
// overflow, and every Redis call of a decision short.
const (
	// MaxLimit is the largest Limit.
	MaxLimit = 1_000_000_000
	// MaxWindow is the largest Window, and MaxMaxDelay the largest MaxDelay.
	MaxWindow   = 366 * 24 * time.Hour
	MaxMaxDelay = 366 * 24 * time.Hour
	// MaxInFlightCap is the largest MaxInFlight, and MaxParkedCap the
	// largest MaxParked.
	MaxInFlightCap = 1 << 30
	MaxParkedCap   = 1 << 30
	// MaxLogEntries is the most entries a tenant's log may hold in Log
	// mode, Limit × (1 + MaxDelay/Window, rounded up): every call on the
	// log, its trim and its expiry included, then deletes or walks at most
	// that many, in tens of milliseconds, well within the gate's timeout.
	// Larger quotas want Counter mode, whose memory and cost do not grow
	// with Limit.
	MaxLogEntries = 100_000
)

// logEntries reports whether a log under q can hold more than
// MaxLogEntries entries, and how many windows it spans (1 + MaxDelay /
// Window, rounded up), without overflow.
func logEntries(q Quota) (windows int64, over bool) {
	windows = 1 + int64((q.MaxDelay+q.Window-1)/q.Window)
	return windows, int64(q.Limit) > MaxLogEntries/windows
}

// DefaultMaxParked is the parked backlog of a tenant whose quota leaves
// MaxParked at 0, in each dispatched queue.
const DefaultMaxParked = 10_000

// MaxWeight is the largest Quota.Weight: the ratio between two tenants'
// shares stays within what a fair queue's integer virtual time resolves.
const MaxWeight = 1_000_000

// EffectiveWeight is q's Weight, with 0 read as 1.
func (q Quota) EffectiveWeight() float64 {
	if q.Weight > 0 {
		return q.Weight
	}
	return 1
}

// parkedBound is q's effective MaxParked.
func (q Quota) parkedBound() int {
	if q.MaxParked > 0 {
		return q.MaxParked
	}
	return DefaultMaxParked
}

// Mode is how a tenant's window is kept in Redis.
type Mode int

const (
	// Log keeps every slot in a sorted set: exact, idempotent on entry IDs,
	// and about 24 bytes an entry while the log stays within Redis's
	// listpack size (128 entries by default; about 102 bytes above). The
	// default.
	Log Mode = iota
	// Counter keeps counts in buckets of a tenth of the window, for quotas
	// too large to log: one value of about 150 bytes a tenant, whatever
	// Limit, and a list of a backlog's buckets when slots are deferred more
	// than a window ahead. It never admits more than Limit in any window; it
	// may admit fewer, by at most a tenth of a window's time. It does not
	// remember entry IDs, so AdmitID is not idempotent in this mode.
	Counter
)

// counterBuckets is how many buckets Counter mode splits a window into.
const counterBuckets = 10

// String returns "log" or "counter".
func (m Mode) String() string {
	switch m {
	case Log:
		return "log"
	case Counter:
		return "counter"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// ParseMode parses "log" or "counter"; "" is Log.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "log":
		return Log, nil
	case "counter":
		return Counter, nil
	}
	return 0, fmt.Errorf("%w: mode %q, want log or counter", ErrInvalidQuota, s)
}

// Validate reports whether q is usable. The error wraps ErrInvalidQuota and
// names the field and the value that are wrong.
func (q Quota) Validate() error {
	switch {
	case q.Limit != NoLimit && (q.Limit < 1 || q.Limit > MaxLimit):
		return fmt.Errorf("%w: Limit is %d, want 1 to %d, or NoLimit (%d)", ErrInvalidQuota, q.Limit, MaxLimit, NoLimit)
	case q.Limit == NoLimit && (q.Window < 0 || q.Window > MaxWindow):
		return fmt.Errorf("%w: Window is %v, want 0 to %v (NoLimit ignores it)", ErrInvalidQuota, q.Window, MaxWindow)
	case q.Limit != NoLimit && (q.Window < time.Millisecond || q.Window > MaxWindow):
		return fmt.Errorf("%w: Window is %v, want 1ms to %v", ErrInvalidQuota, q.Window, MaxWindow)
	case q.MaxDelay < 0 || q.MaxDelay > MaxMaxDelay:
		return fmt.Errorf("%w: MaxDelay is %v, want 0 to %v", ErrInvalidQuota, q.MaxDelay, MaxMaxDelay)
	case q.Mode != Log && q.Mode != Counter:
		return fmt.Errorf("%w: Mode is %d, want Log or Counter", ErrInvalidQuota, q.Mode)
	case q.MaxInFlight < 0 || q.MaxInFlight > MaxInFlightCap:
		return fmt.Errorf("%w: MaxInFlight is %d, want 0 (no cap) to %d", ErrInvalidQuota, q.MaxInFlight, MaxInFlightCap)
	case q.MaxParked < 0 || q.MaxParked > MaxParkedCap:
		return fmt.Errorf("%w: MaxParked is %d, want 0 (the default) to %d", ErrInvalidQuota, q.MaxParked, MaxParkedCap)
	case q.Weight < 0 || math.IsNaN(q.Weight) || math.IsInf(q.Weight, 0) || q.Weight > MaxWeight:
		return fmt.Errorf("%w: Weight is %v, want 0 (meaning 1) up to %d", ErrInvalidQuota, q.Weight, MaxWeight)
	}
	if q.Mode == Log && !q.Unlimited() {
		if windows, over := logEntries(q); over {
			return fmt.Errorf("%w: log size: Limit %d × %d windows (1 + MaxDelay %v / Window %v) is more than MaxLogEntries (%d) a tenant's log may hold; use Counter mode for a quota this large",
				ErrInvalidQuota, q.Limit, windows, q.MaxDelay, q.Window, MaxLogEntries)
		}
	}
	return nil
}

// String formats q as "100/1m0s, max delay 30s", or for NoLimit as "no
// limit", followed by the fields that apply and are set: ", counter",
// ", max in flight 4, max parked 10000" (a tenant without a cap, whose
// tasks wait their turn in fair queues, shows its own max parked alone),
// ", weight 3", ", paused".
func (q Quota) String() string {
	var s string
	if q.Unlimited() {
		s = "no limit"
	} else {
		s = fmt.Sprintf("%d/%v", q.Limit, q.Window)
		if q.MaxDelay > 0 {
			s += fmt.Sprintf(", max delay %v", q.MaxDelay)
		}
		if q.Mode != Log {
			s += ", " + q.Mode.String()
		}
	}
	if q.MaxInFlight > 0 {
		s += fmt.Sprintf(", max in flight %d, max parked %d", q.MaxInFlight, q.parkedBound())
	} else if q.MaxParked > 0 {
		s += fmt.Sprintf(", max parked %d", q.MaxParked)
	}
	if q.Weight > 0 && q.Weight != 1 {
		s += ", weight " + strconv.FormatFloat(q.Weight, 'g', -1, 64)
	}
	if q.Paused {
		s += ", paused"
	}
	return s
}

// quotaJSON is how a Quota is stored in Redis: readable in redis-cli and
// exact, since Go duration strings round-trip. NoLimit is stored as
// "limit":-1, with the (ignored) window as it was given, "0s" by default.
type quotaJSON struct {
	Limit    int    `json:"limit"`
	Window   string `json:"window"`
	MaxDelay string `json:"max_delay,omitempty"`
	Mode     string `json:"mode,omitempty"`
	// MaxInFlight and MaxParked are absent when zero, so quotas written
	// before the cap existed read the same.
	MaxInFlight int `json:"max_in_flight,omitempty"`
	MaxParked   int `json:"max_parked,omitempty"`
	// Weight is absent when 0 (meaning 1).
	Weight float64 `json:"weight,omitempty"`
	// Paused is absent when false, so quotas written before pause
	// existed read the same.
	Paused bool `json:"paused,omitempty"`
}

// MarshalText encodes q as the JSON stored in the quota hash, e.g.
// {"limit":100,"window":"1m0s","max_delay":"30s"}.
func (q Quota) MarshalText() ([]byte, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	j := quotaJSON{Limit: q.Limit, Window: q.Window.String()}
	if q.MaxDelay > 0 {
		j.MaxDelay = q.MaxDelay.String()
	}
	if q.Mode != Log {
		j.Mode = q.Mode.String()
	}
	j.MaxInFlight, j.MaxParked, j.Weight, j.Paused = q.MaxInFlight, q.MaxParked, q.Weight, q.Paused
	return json.Marshal(j)
}

// UnmarshalText decodes what MarshalText wrote and validates it. Anything
// else, including values written by hand that do not parse, gives an error
// wrapping ErrInvalidQuota.
func (q *Quota) UnmarshalText(b []byte) error {
	var j quotaJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("%w: %q: %v", ErrInvalidQuota, truncate(b), err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: %q: trailing data", ErrInvalidQuota, truncate(b))
	}
	w, err := time.ParseDuration(j.Window)
	if err != nil {
		return fmt.Errorf("%w: window %q: %v", ErrInvalidQuota, j.Window, err)
	}
	var d time.Duration
	if j.MaxDelay != "" {
		if d, err = time.ParseDuration(j.MaxDelay); err != nil {
			return fmt.Errorf("%w: max_delay %q: %v", ErrInvalidQuota, j.MaxDelay, err)
		}
	}
	mode, err := ParseMode(j.Mode)
	if err != nil {
		return err
	}
	got := Quota{Limit: j.Limit, Window: w, MaxDelay: d, Mode: mode, MaxInFlight: j.MaxInFlight, MaxParked: j.MaxParked, Weight: j.Weight, Paused: j.Paused}
	if err := got.Validate(); err != nil {
		return err
	}
	*q = got
	return nil
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// Quotas looks up a tenant's quota. The gate calls it on every decision, so
// implementations answer from memory: StaticQuotas holds a fixed table and
// RedisQuotas caches the hash operators edit.
type Quotas interface {
	// Quota returns tenant's quota, or an error wrapping ErrNoQuota when it
	// has none and there is no default.
	Quota(ctx context.Context, tenant string) (Quota, error)
}

// StaticQuotas is a fixed quota table. Its zero value has no quotas at all.
type StaticQuotas struct {
	// Default applies to tenants missing from Tenants; nil means none.
	Default *Quota
	// Tenants maps a tenant to its own quota.
	Tenants map[string]Quota
	// Keys maps a key (enqueue.Keys) to its quota, which only caps and
	// pauses (Quota.ValidateAsKey). A key missing from it is unlimited;
	// there is no default.
	Keys map[string]Quota
}

// Quota returns the tenant's quota, else the default, else ErrNoQuota. An
// invalid tenant (ValidateTenant) gets ErrInvalidTenant.
func (s StaticQuotas) Quota(_ context.Context, tenant string) (Quota, error) {
	if err := ValidateTenant(tenant); err != nil {
		return Quota{}, err
	}
	if q, ok := s.Tenants[tenant]; ok {
		return q, nil
	}
	if s.Default != nil {
		return *s.Default, nil
	}
	return Quota{}, fmt.Errorf("%w for tenant %q", ErrNoQuota, tenant)
}
