package enqueue

import (
	"context"
	"sync"

	"github.com/admitq/admitq/admission"
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
	n    int                // calls in the group
	slot admission.Decision // the decision of the call that took the slot, if one did
	kept bool               // a call of the group wrote its task, or may have
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

// leave ends the call's membership: d is its decision (the zero value
// when it has none), kept says that its task was written or may have been.
// It reports whether the call must give back slot, the slot its group
// took, and then call released once it has.
func (h hold) leave(d admission.Decision, kept bool) (slot admission.Decision, release bool) {
	took := tookSlot(d)
	if h.c == nil {
		return d, took && !kept
	}
	h.cs.mu.Lock()
	defer h.cs.mu.Unlock()
	c := h.c
	c.n--
	if took && !tookSlot(c.slot) {
		c.slot = d
	}
	c.kept = c.kept || kept
	if c.n > 0 {
		return admission.Decision{}, false
	}
	if tookSlot(c.slot) && !c.kept {
		c.releasing = make(chan struct{})
		return c.slot, true
	}
	delete(h.cs.m, h.k)
	return admission.Decision{}, false
}

// tookSlot reports whether decision d took a slot in Redis, which Release
// can give back: one that an earlier call took (Existing), a rejection and
// a local decision took none.
func tookSlot(d admission.Decision) bool {
	return d.ID != "" && !d.Existing && !d.Local && d.Outcome != admission.Rejected && d.Outcome != admission.Parked
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
