package worker

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

func TestIsFailure(t *testing.T) {
	plain := errors.New("billing is down")
	never := func(error) bool { return false }
	always := func(error) bool { return true }
	tests := []struct {
		desc string
		user func(error) bool
		err  error
		want bool
	}{
		{"throttled is not a failure", nil, Throttled(time.Second), false},
		{"wrapped throttled is not a failure", nil, fmt.Errorf("billing: %w", Throttled(time.Second)), false},
		{"throttled is not a failure even if the user's IsFailure says so", always, Throttled(time.Second), false},
		{"joined throttled is not a failure", nil, errors.Join(plain, Throttled(time.Second)), false},
		{"a throttled key is not a failure", always, fmt.Errorf("stripe: %w", ThrottledKey("api:stripe", time.Second)), false},
		{"a throttled key the task may not carry is not a failure", always, ThrottledKey("", time.Second), false},
		{"plain error is a failure by default", nil, plain, true},
		{"plain error is decided by the user's IsFailure", never, plain, false},
		{"nil is not a failure by default", nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := isFailure(tc.user)(tc.err); got != tc.want {
				t.Errorf("isFailure(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 10, 300_000_000, time.UTC) // .3 s past a second
	fixed := func(int, error, *asynq.Task) time.Duration { return 42 * time.Second }
	task := asynq.NewTask("t", nil)
	tests := []struct {
		desc string
		user asynq.RetryDelayFunc
		err  error
		want time.Duration
	}{
		{"throttled waits RetryAfter, rounded up to a whole second", nil, Throttled(2 * time.Second), 2700 * time.Millisecond},
		{"wrapped throttled waits RetryAfter too", fixed, fmt.Errorf("x: %w", Throttled(2*time.Second)), 2700 * time.Millisecond},
		{"throttled without delay waits for the next second", nil, Throttled(0), 700 * time.Millisecond},
		{"negative RetryAfter counts as zero", nil, Throttled(-time.Minute), 700 * time.Millisecond},
		{"a throttled key waits RetryAfter too", fixed, ThrottledKey("api:stripe", 2*time.Second), 2700 * time.Millisecond},
		{"plain error is decided by the user's RetryDelayFunc", fixed, errors.New("x"), 42 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got := retryDelay(tc.user, func() time.Time { return now })(0, tc.err, task)
			if got != tc.want {
				t.Errorf("delay = %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("plain error with no user func gets asynq's backoff", func(t *testing.T) {
		// asynq.DefaultRetryDelayFunc(0, ...) is 15 s plus up to 29 s of jitter.
		got := retryDelay(nil, time.Now)(0, errors.New("x"), task)
		if got < 15*time.Second || got >= 45*time.Second {
			t.Errorf("delay = %v, want asynq's default in [15s, 45s)", got)
		}
	})
}

// TestThrottleDelayIsALowerBound checks the property asynq needs: the retry
// time is a whole second (asynq drops fractions) no earlier than now+d and
// less than a second later.
func TestThrottleDelayIsALowerBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for range 10000 {
		now := base.Add(time.Duration(r.Int64N(int64(time.Hour))))
		d := time.Duration(r.Int64N(int64(10 * time.Second)))
		if r.IntN(10) == 0 {
			d = d.Truncate(time.Second) // exact seconds are an edge
		}
		at := now.Add(throttleDelay(now, d))
		if at.Nanosecond() != 0 || at.Before(now.Add(d)) || !at.Before(now.Add(d+time.Second)) {
			t.Fatalf("throttleDelay(%v, %v) retries at %v, want the first whole second at or after %v", now, d, at, now.Add(d))
		}
	}
}

// TestANilThrottledErrorSaysSo: Error on a nil *ThrottledError does not
// panic.
func TestANilThrottledErrorSaysSo(t *testing.T) {
	var e *ThrottledError
	if msg := e.Error(); msg == "" {
		t.Error("empty message")
	}
}
