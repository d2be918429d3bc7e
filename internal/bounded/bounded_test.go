package bounded

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Call returns call's error when call ends first, and the context's cause
// as soon as the context ends first, without waiting for call.
func TestCallEndsWithTheFirstToEnd(t *testing.T) {
	want := errors.New("from the call")
	if err := Call(context.Background(), func(context.Context) error { return want }); err != want {
		t.Errorf("a call that ends: %v, want %v", err, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	release := make(chan struct{})
	defer close(release)
	start := time.Now()
	err := Call(ctx, func(context.Context) error { <-release; return nil })
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
		t.Errorf("a call that outlasts its context: %v after %v, want context.DeadlineExceeded at once", err, time.Since(start))
	}
}
