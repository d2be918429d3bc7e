// Package quotainput checks a quota as a person types it, on the command
// line (admitq quota set) or in the dashboard's form, so that both give the
// same messages for the same mistakes.
package quotainput

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/admitq/admitq/admission"
)

// A FieldError names the field that was wrong, the value given and why.
// Error formats it as the command line does: "--limit 0: want at least 1".
type FieldError struct {
	Field  string // limit, window, max-delay, mode, max-in-flight, max-parked or weight
	Value  string // as given
	Reason string // e.g. "want at least 1"
}

func (e *FieldError) Error() string {
	return "--" + e.Field + " " + e.Value + ": " + e.Reason
}

// Message is the error without the flag name, for a form that shows it next
// to its field: "0: want at least 1".
func (e *FieldError) Message() string {
	if e.Value == "" {
		return e.Reason
	}
	return e.Value + ": " + e.Reason
}

// Check validates a quota's fields in the order the command line names them
// and returns the first mistake as a *FieldError. An empty mode is a mistake:
// on a command line or in a form it is a slip, not a choice of log.
// limit may be admission.NoLimit, and then window may be 0. maxInFlight 0
// means no cap, and maxParked 0 the default bound.
func Check(limit int, window, maxDelay time.Duration, mode string, maxInFlight, maxParked int) (admission.Quota, error) {
	m, fe := ParseMode(mode)
	if fe != nil {
		// The fields before mode are named first, as the flags are.
		for _, e := range []*FieldError{checkLimit(limit), checkWindowFor(limit, window), checkMaxDelay(maxDelay)} {
			if e != nil {
				return admission.Quota{}, e
			}
		}
		return admission.Quota{}, fe
	}
	q := admission.Quota{Limit: limit, Window: window, MaxDelay: maxDelay, Mode: m, MaxInFlight: maxInFlight, MaxParked: maxParked}
	if err := CheckQuota(q); err != nil {
		return admission.Quota{}, err
	}
	return q, nil
}

// CheckQuota validates a whole quota, as quota update makes it from the
// stored one and the flags given, field by field in the order the command
// line names them: the first mistake is a *FieldError, or else the error
// of admission.Quota.Validate.
func CheckQuota(q admission.Quota) error {
	for _, fe := range []*FieldError{checkLimit(q.Limit), checkWindowFor(q.Limit, q.Window), checkMaxDelay(q.MaxDelay),
		checkMaxInFlight(q.MaxInFlight), checkMaxParked(q.MaxParked, q.MaxInFlight), CheckWeight(q.Weight)} {
		if fe != nil {
			return fe
		}
	}
	return q.Validate()
}

// None is how a person writes admission.NoLimit: --limit none.
const None = "none"

// ParseLimit reads a limit as the command line and the form take it: a
// whole number of at least 1, or "none" for admission.NoLimit.
func ParseLimit(s string) (int, *FieldError) {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, None) {
		return admission.NoLimit, nil
	}
	n, err := strconv.Atoi(t)
	if err != nil {
		return 0, &FieldError{"limit", strconv.Quote(s), "want a whole number, or none for no rate limit"}
	}
	if n < 1 {
		// Not even -1, NoLimit's value: "none" says it.
		return 0, &FieldError{"limit", t, "want at least 1"}
	}
	return n, nil
}

// FormatLimit writes a limit as ParseLimit reads it.
func FormatLimit(limit int) string {
	if limit == admission.NoLimit {
		return None
	}
	return strconv.Itoa(limit)
}

// ParseMode reads a mode, log or counter; empty is a mistake.
func ParseMode(mode string) (admission.Mode, *FieldError) {
	if fe := checkMode(mode); fe != nil {
		return 0, fe
	}
	m, _ := admission.ParseMode(mode)
	return m, nil
}

func checkLimit(limit int) *FieldError {
	if limit < 1 && limit != admission.NoLimit {
		return &FieldError{"limit", strconv.Itoa(limit), "want at least 1"}
	}
	return nil
}

// checkWindowFor checks the window of a quota whose limit is limit: a
// quota without a rate limit ignores it, and 0 is fine.
func checkWindowFor(limit int, window time.Duration) *FieldError {
	if limit == admission.NoLimit {
		if window < 0 {
			return &FieldError{"window", window.String(), "want 0 or more"}
		}
		return nil
	}
	return checkWindow(window)
}

func checkWindow(window time.Duration) *FieldError {
	if window < time.Millisecond {
		return &FieldError{"window", window.String(), "want at least 1ms"}
	}
	return nil
}

func checkMaxDelay(d time.Duration) *FieldError {
	if d < 0 {
		return &FieldError{"max-delay", d.String(), "want 0 or more"}
	}
	return nil
}

func checkMode(mode string) *FieldError {
	if _, err := admission.ParseMode(mode); err != nil || mode == "" {
		return &FieldError{"mode", strconv.Quote(mode), "want log or counter"}
	}
	return nil
}

func checkMaxInFlight(n int) *FieldError {
	if n < 0 {
		return &FieldError{"max-in-flight", strconv.Itoa(n), "want 0 (no cap) or more"}
	}
	return nil
}

func checkMaxParked(n, maxInFlight int) *FieldError {
	switch {
	case n < 0:
		return &FieldError{"max-parked", strconv.Itoa(n), "want 0 (the default) or more"}
	}
	return nil
}

// Parse reads a quota from text fields, as a form sends them, then Checks
// it. Every field's mistake is returned, keyed by field name, so that a
// form can show each next to its field; the error is their join. An empty
// max delay, max in flight or max parked is 0. The limit may be "none"
// (admission.NoLimit), and then the window may be empty.
func Parse(limit, window, maxDelay, mode, maxInFlight, maxParked string) (admission.Quota, map[string]*FieldError, error) {
	errs := map[string]*FieldError{}
	add := func(fe *FieldError) {
		if fe != nil {
			errs[fe.Field] = fe
		}
	}
	l, fe := ParseLimit(limit)
	add(fe)
	var w time.Duration
	var err error
	if l == admission.NoLimit && strings.TrimSpace(window) == "" {
		// No rate limit, no window.
	} else if w, err = parseDuration(window); err != nil {
		add(&FieldError{"window", strconv.Quote(window), "want a duration such as 500ms, 1s or 1m"})
	} else {
		add(checkWindowFor(l, w))
	}
	d := time.Duration(0)
	if strings.TrimSpace(maxDelay) != "" {
		if d, err = parseDuration(maxDelay); err != nil {
			add(&FieldError{"max-delay", strconv.Quote(maxDelay), "want a duration such as 0, 30s or 5m"})
		} else {
			add(checkMaxDelay(d))
		}
	}
	mode = strings.TrimSpace(mode)
	add(checkMode(mode))
	inFlight, ok := parseCount("max-in-flight", maxInFlight, add)
	if ok {
		add(checkMaxInFlight(inFlight))
	}
	parked, ok := parseCount("max-parked", maxParked, add)
	if ok && errs["max-in-flight"] == nil {
		add(checkMaxParked(parked, inFlight))
	}
	if len(errs) == 0 {
		q, err := Check(l, w, d, mode, inFlight, parked)
		if err == nil {
			return q, nil, nil
		}
		return admission.Quota{}, nil, err
	}
	var all []error
	for _, f := range Fields() {
		if e, ok := errs[f]; ok {
			all = append(all, e)
		}
	}
	return admission.Quota{}, errs, errors.Join(all...)
}

// Fields returns the quota's fields in the order the command line names
// them, by the names FieldError uses and a form sends.
func Fields() []string {
	return []string{"limit", "window", "max-delay", "mode", "max-in-flight", "max-parked", "weight"}
}

// parseCount reads an optional whole number: empty is 0. A mistake goes to
// add, and ok is false.
func parseCount(field, s string, add func(*FieldError)) (n int, ok bool) {
	if strings.TrimSpace(s) == "" {
		return 0, true
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		add(&FieldError{field, strconv.Quote(s), "want a whole number"})
		return 0, false
	}
	return n, true
}

// CheckWeight checks a quota's weight: 0 (meaning 1) up to
// admission.MaxWeight, a number (not NaN or infinite).
func CheckWeight(w float64) *FieldError {
	if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) || w > admission.MaxWeight {
		format := byte('f')
		if math.Abs(w) >= 1e15 {
			format = 'g'
		}
		return &FieldError{"weight", strconv.FormatFloat(w, format, -1, 64), fmt.Sprintf("want 0 (meaning 1) up to %d", admission.MaxWeight)}
	}
	return nil
}

// ParseWeight reads a weight as a form sends it, then checks it. Empty is
// 0, meaning 1.
func ParseWeight(s string) (float64, *FieldError) {
	if strings.TrimSpace(s) == "" {
		return 0, nil
	}
	w, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, &FieldError{"weight", strconv.Quote(s), "want a number such as 1, 3 or 0.5"}
	}
	return w, CheckWeight(w)
}

// WithWeight returns q with its Weight set to w, once w is checked.
func WithWeight(q admission.Quota, w float64) (admission.Quota, error) {
	if fe := CheckWeight(w); fe != nil {
		return admission.Quota{}, fe
	}
	q.Weight = w
	if err := q.Validate(); err != nil {
		return admission.Quota{}, err
	}
	return q, nil
}

// Warning returns what a person setting q should know although q is
// valid, or "". A MaxDelay under a second rarely defers: a deferred slot is
// rounded up to the caller's granularity (a whole second for asynq, which
// schedules whole seconds), and MaxDelay is compared with the rounded slot,
// so only requests that come within MaxDelay of a second's turn are
// deferred and the others over the limit are rejected. A quota with no
// rate limit defers nothing, whatever its MaxDelay.
func Warning(q admission.Quota) string {
	if !q.Unlimited() && q.MaxDelay > 0 && q.MaxDelay < time.Second {
		return fmt.Sprintf("--max-delay %v is under a second: asynq schedules whole seconds, so a deferred slot is rounded up "+
			"to the next second and most tasks over the limit are rejected, not deferred; "+
			"choose 0 to reject at once, or 1s or more (a window or more to absorb a burst) to defer", q.MaxDelay)
	}
	return ""
}

func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty")
	}
	return time.ParseDuration(s)
}
