package admission

import (
	"testing"
	"time"
)

// TestDenyCacheRoomEntries walks a room entry through its states: calls
// out up to the room, waiters woken when one comes back, a lapse once no
// call is out, and tickets of an entry that has gone.
func TestDenyCacheRoomEntries(t *testing.T) {
	q := Quota{Limit: 10, Window: time.Second} // a slot's share: 100ms
	c := newDenyCache(10)
	now := time.Now()
	lookup := func(at time.Time) (bool, *denial, chan struct{}) {
		_, ok, ticket, wait := c.lookup("t", q, 0, at, new(waiter))
		return ok, ticket, wait
	}

	if ok, ticket, wait := lookup(now); ok || ticket != nil || wait != nil {
		t.Fatal("a tenant without an entry is not a plain miss")
	}
	c.room("t", q, 0, 2, now, now, c.generation("t"))
	if c.entries["t"] != nil {
		t.Fatal("room made an entry for a tenant never rejected")
	}
	// A tenant whose rejection ran out, with room for 2.
	roomFor := func(free int, at time.Time) {
		c.forget("t")
		c.put("t", q, 0, at, at, at, c.generation("t")) // rejected until at
		c.room("t", q, 0, free, at, at, c.generation("t"))
	}
	roomFor(2, now)
	_, first, _ := lookup(now)
	_, second, _ := lookup(now)
	_, third, wait := lookup(now)
	if first == nil || second == nil || third != nil || wait == nil {
		t.Fatalf("room 2: tickets %v, %v, then %v and wait %v; want two tickets, then a wait", first, second, third, wait)
	}
	// A waiter waits for the two calls out when it began, then for the two
	// that took the room they left, and no longer, even while new callers
	// keep taking the room each return frees.
	var w waiter
	if _, _, _, wait = c.lookup("t", q, 0, now, &w); wait == nil {
		t.Fatal("no wait with no room")
	}
	c.returned("t", first)
	select {
	case <-wait:
	default:
		t.Fatal("a call that came back did not wake its waiters")
	}
	take := func() *denial {
		t.Helper()
		_, ticket, _ := lookup(now)
		if ticket == nil {
			t.Fatal("no ticket for the room a returned call freed")
		}
		return ticket
	}
	waits := func(want bool, why string) {
		t.Helper()
		_, ok, ticket, wait := c.lookup("t", q, 0, now, &w)
		if ok || ticket != nil || (wait != nil) != want {
			t.Fatal(why)
		}
	}
	a := take() // the room first left
	waits(true, "a waiter went with a call it waited for still out")
	c.returned("t", second) // both calls it waited for are back
	b := take()
	waits(true, "a waiter went without waiting for the calls that took the room")
	c.returned("t", a)
	d := take()
	waits(true, "a waiter went with a call of its second round still out")
	c.returned("t", b)
	e := take()
	waits(false, "a waiter waited on after two rounds of calls came back")
	c.returned("t", d)
	c.returned("t", e)

	// The reply that fills the window rejects until a time; once it passes,
	// the entry has room for one, the probe.
	until := now.Add(50 * time.Millisecond)
	c.put("t", q, 0, now, until, now, c.generation("t"))
	if ok, _, _ := lookup(now); !ok {
		t.Fatal("a rejection does not hold before its time")
	}
	_, probe, _ := lookup(until)
	if probe == nil {
		t.Fatal("no probe once the rejection's time passed")
	}
	if _, ticket, wait := lookup(until); ticket != nil || wait == nil {
		t.Fatal("a second request went beside the probe")
	}

	// Gone with forget: its waiters wake, and its tickets change nothing.
	_, _, wait = lookup(until)
	c.forget("t")
	select {
	case <-wait:
	default:
		t.Fatal("forget did not wake the waiters")
	}
	c.returned("t", probe)
	roomFor(1, until)
	if _, ticket, _ := lookup(until); ticket == nil {
		t.Fatal("a ticket of the forgotten entry counted against the new one")
	}

	// With no call out, a room entry lapses after a slot's share.
	roomFor(1, now)
	if _, ticket, _ := lookup(now.Add(99 * time.Millisecond)); ticket == nil {
		t.Fatal("no ticket from a fresh room entry")
	}
	roomFor(1, now)
	if ok, ticket, wait := lookup(now.Add(100 * time.Millisecond)); ok || ticket != nil || wait != nil {
		t.Fatal("a room entry with no call out did not lapse after a slot's share")
	}

	// A reply older than the entry's tells nothing.
	roomFor(1, now)
	c.room("t", q, 0, 5, now.Add(-time.Millisecond), now, c.generation("t"))
	if e := c.entries["t"]; e == nil || e.room != 1 {
		t.Fatalf("an older reply changed the room: %+v", e)
	}

	// Much room, or none known, ends the entry.
	for _, free := range []int{maxRoom + 1, 0, -1} {
		roomFor(1, now)
		c.room("t", q, 0, free, now, now, c.generation("t"))
		if ok, ticket, wait := lookup(now); ok || ticket != nil || wait != nil {
			t.Errorf("room %d left an entry", free)
		}
	}
}
