package bounded

import "context"

// Call runs call and returns when it does or when ctx ends, whichever is
// first; then it returns context.Cause(ctx), and call finishes in the
// background, bounded by the client's own timeouts. call must not write
// anything the caller reads after Call returns early.
func Call(ctx context.Context, call func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
