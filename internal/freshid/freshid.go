// Package freshid marks a context with the admission IDs that were made
// for that call alone: no retry can ever ask for those IDs again. So the
// gate may give back the slots of an admission its caller no longer waits
// for, and the dispatcher's park need not look for the ID among the parked
// tasks.
//
// The mark names its IDs. Code that a marked call reaches (a custom
// admission.Quotas, say) and that admits IDs of its own with the same
// context gets no mark for them.
//
// package enqueue marks the contexts of Enqueue calls whose task IDs it made
// itself; packages admission and dispatch read the mark. It is no one's
// public API.
//
//	id := uuid.NewString()
//	d, err := gate.AdmitID(freshid.Mark(ctx, id), tenant, id)
package freshid

import "context"

type key struct{}

// A Marker is a mark's answer: whether it names id. A context type of its
// own may answer Value(k), where IsKey(k), with a Marker of its own instead
// of wrapping its context once more (package enqueue's per-call context).
type Marker interface {
	Made(id string) bool
}

// one is the mark of a single ID, set of several.
type (
	one string
	set map[string]struct{}
)

func (o one) Made(id string) bool { return string(o) == id }

func (s set) Made(id string) bool {
	_, ok := s[id]
	return ok
}

// Mark returns ctx marked: ids are new, and no other call will ask for
// them.
func Mark(ctx context.Context, ids ...string) context.Context {
	if len(ids) == 1 {
		return context.WithValue(ctx, key{}, one(ids[0]))
	}
	s := make(set, len(ids))
	for _, id := range ids {
		s[id] = struct{}{}
	}
	return context.WithValue(ctx, key{}, s)
}

// IsKey reports whether k is the key Mark stores its mark under.
func IsKey(k any) bool {
	_, ok := k.(key)
	return ok
}

// Made reports whether ctx's mark names id.
func Made(ctx context.Context, id string) bool {
	m, _ := ctx.Value(key{}).(Marker)
	return m != nil && m.Made(id)
}

// MadeAll reports whether ctx's mark names every one of ids, and there is
// at least one.
func MadeAll(ctx context.Context, ids []string) bool {
	m, _ := ctx.Value(key{}).(Marker)
	if m == nil || len(ids) == 0 {
		return false
	}
	for _, id := range ids {
		if !m.Made(id) {
			return false
		}
	}
	return true
}
