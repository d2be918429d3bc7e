// Package freshid marks a context whose admission IDs were made for that
// call alone: no retry can ever ask for those IDs again. So the gate may
// give back the slots of an admission its caller no longer waits for, and
// the dispatcher's park need not look for the ID among the parked tasks.
//
// package enqueue marks the contexts of Enqueue calls whose task IDs it made
// itself; packages admission and dispatch read the mark. It is no one's
// public API.
//
//	d, err := gate.AdmitID(freshid.Mark(ctx), tenant, uuid.NewString())
package freshid

import "context"

type key struct{}

// Mark returns ctx marked: the IDs admitted under it are new, and no other
// call will ask for them.
func Mark(ctx context.Context) context.Context { return context.WithValue(ctx, key{}, true) }

// IsKey reports whether k is the key Mark stores its mark under, for a
// context type of its own that answers Value(k) with true instead of
// wrapping ctx once more (package enqueue's per-call context).
func IsKey(k any) bool {
	_, ok := k.(key)
	return ok
}

// Marked reports whether ctx was marked by Mark.
func Marked(ctx context.Context) bool {
	v, _ := ctx.Value(key{}).(bool)
	return v
}
