package enqueue

import (
	"context"
	"sync"
)

// claims tracks the Enqueue calls in flight with each task ID of the
// caller's choosing, so that a slot is given back only once no call with
// its ID still relies on it.
//
// Calls with one ID share one slot: the first takes it, the others are
// admitted on it (Decision.Existing). A call whose write certainly did not
// happen may not give the slot back while another call with the ID may
// still write its task, or that task would sit in the queue without a slot.
// So the last call of a group gives it back, and only when a call of the
// group took the slot and none wrote, or may have written, the task. While
// it does, new calls with the ID wait, and are then admitted afresh.
//
// Task IDs that Enqueue makes itself are new, and never shared: they need
// no claim. claims sees the calls of one Client only; see Enqueue.
type claims struct {
	mu sync.Mutex
	m  map[claimKey]*claim
}

type claimKey struct{ tenant, id string }

// claim is one ID's group of calls in flight. Its fields are guarded by
// claims.mu.
type claim struct {
	n    int  // calls in the group
	took bool // a call of the group took the slot (its decision was not Existing)
	kept bool // a call of the group wrote its task, or may have
	// releasing is set while the group's last call gives the slot back,
	// and closed when it is done.
	releasing chan struct{}
}

// hold is one call's membership of its ID's group; the zero value, for an
// ID Enqueue made itself, is a group of one.
type hold struct {
	cs *claims
	k  claimKey
	c  *claim
}

// join adds a call with tenant's task ID id to its group, after waiting for
// a release of the ID's slot to finish. It fails only when ctx ends first.
func (cs *claims) join(ctx context.Context, tenant, id string) (hold, error) {
	k := claimKey{tenant, id}
	for {
		cs.mu.Lock()
		c := cs.m[k]
		if c == nil {
			if cs.m == nil {
				cs.m = make(map[claimKey]*claim)
			}
			c = &claim{}
			cs.m[k] = c
		}
		if c.releasing == nil {
			c.n++
			cs.mu.Unlock()
			return hold{cs: cs, k: k, c: c}, nil
		}
		wait := c.releasing
		cs.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return hold{}, ctxError(ctx)
		}
	}
}

// leave ends the call's membership: took says its decision took the slot,
// kept that its task was written or may have been. It reports whether the
// call must give the slot back, and then call released once it has.
func (h hold) leave(took, kept bool) (release bool) {
	if h.c == nil {
		return took && !kept
	}
	h.cs.mu.Lock()
	defer h.cs.mu.Unlock()
	c := h.c
	c.n--
	c.took = c.took || took
	c.kept = c.kept || kept
	if c.n > 0 {
		return false
	}
	if c.took && !c.kept {
		c.releasing = make(chan struct{})
		return true
	}
	delete(h.cs.m, h.k)
	return false
}

// released ends a release that leave asked for, and lets the calls that
// wait for it go on.
func (h hold) released() {
	if h.c == nil {
		return
	}
	h.cs.mu.Lock()
	defer h.cs.mu.Unlock()
	delete(h.cs.m, h.k)
	close(h.c.releasing)
}
