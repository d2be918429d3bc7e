package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Quota is a tenant's admission limit: at most Limit admissions in any
// interval of length Window. A request that finds the window full is
// deferred to its slot if that slot is at most MaxDelay ahead, and rejected
// otherwise.
type Quota struct {
	// Limit is the number of admissions allowed in any Window; at least 1.
	Limit int
	// Window is the length of the sliding window; at least 1ms.
	Window time.Duration
	// MaxDelay is how far ahead a request that finds the window full may be
	// deferred. 0 means never defer: such a request is rejected.
	MaxDelay time.Duration
}

// Validate reports whether q is usable. The error wraps ErrInvalidQuota and
// names the field and the value that are wrong.
func (q Quota) Validate() error {
	switch {
	case q.Limit < 1:
		return fmt.Errorf("%w: Limit is %d, want at least 1", ErrInvalidQuota, q.Limit)
	case q.Window < time.Millisecond:
		return fmt.Errorf("%w: Window is %v, want at least 1ms", ErrInvalidQuota, q.Window)
	case q.MaxDelay < 0:
		return fmt.Errorf("%w: MaxDelay is %v, want 0 or more", ErrInvalidQuota, q.MaxDelay)
	}
	return nil
}

// String formats q as "100/1m0s, max delay 30s".
func (q Quota) String() string {
	s := fmt.Sprintf("%d/%v", q.Limit, q.Window)
	if q.MaxDelay > 0 {
		s += fmt.Sprintf(", max delay %v", q.MaxDelay)
	}
	return s
}

// maxEntries is the most log entries a tenant can hold under q: Limit in the
// window and Limit in each Window of reservations ahead.
func (q Quota) maxEntries() int {
	return q.Limit * (1 + int((q.MaxDelay+q.Window-1)/q.Window))
}

// quotaJSON is how a Quota is stored in Redis: readable in redis-cli and
// exact, since Go duration strings round-trip.
type quotaJSON struct {
	Limit    int    `json:"limit"`
	Window   string `json:"window"`
	MaxDelay string `json:"max_delay,omitempty"`
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
	if dec.More() {
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
	got := Quota{Limit: j.Limit, Window: w, MaxDelay: d}
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
}

// Quota returns the tenant's quota, else the default, else ErrNoQuota.
func (s StaticQuotas) Quota(_ context.Context, tenant string) (Quota, error) {
	if q, ok := s.Tenants[tenant]; ok {
		return q, nil
	}
	if s.Default != nil {
		return *s.Default, nil
	}
	return Quota{}, fmt.Errorf("%w for tenant %q", ErrNoQuota, tenant)
}
