package admission_test

import (
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestExpiryParity: admit.lua skips its look for a reservation ahead when
// the log's expiry is even, so the expiry must be odd while one lies ahead,
// and a key whose expiry someone removed must be looked at in full. Then,
// once the reservation has passed, an admission makes the expiry even
// again, so the common path gets its saving back.
func TestExpiryParity(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	const window = 300 * time.Millisecond
	one := admission.Quota{Limit: 1, Window: window, MaxDelay: time.Second}
	five := one
	five.Limit = 5
	g1 := admission.New(rdb, static(one), admission.WithPrefix("parity"), admission.WithTimeout(5*time.Second))
	g5 := admission.New(rdb, static(five), admission.WithPrefix("parity"), admission.WithTimeout(5*time.Second))
	key := "parity:{p}:log"
	expiry := func() int64 { return rdb.PExpireTime(ctx, key).Val().Milliseconds() }

	a, err := g1.Admit(ctx, "p")
	if err != nil || a.Outcome != admission.Admitted {
		t.Fatalf("first Admit = %+v, %v; want admitted", a, err)
	}
	if e := expiry(); e%2 != 0 {
		t.Fatalf("expiry %d is odd with nothing ahead", e)
	}
	b, err := g1.Admit(ctx, "p")
	if err != nil || b.Outcome != admission.Deferred {
		t.Fatalf("second Admit = %+v, %v; want deferred", b, err)
	}
	if e := expiry(); e%2 != 1 {
		t.Fatalf("expiry %d is even with a reservation ahead", e)
	}

	// Someone drops the expiry. Under the larger limit the log has room,
	// but the reservation ahead still holds the next slot back (FIFO).
	if err := rdb.Persist(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := g5.Admit(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if c.Outcome != admission.Deferred || c.At.Before(b.At) {
		t.Fatalf("Admit after PERSIST = %+v; want deferred to %v or later", c, b.At)
	}
	if ms := rdb.PTTL(ctx, key).Val(); ms <= 0 {
		t.Fatalf("PTTL = %v after an admission: the key must expire again", ms)
	}

	// Past every reservation, an admission evens the expiry out.
	time.Sleep(time.Until(c.At) + 10*time.Millisecond)
	d, err := g5.Admit(ctx, "p")
	if err != nil || d.Outcome != admission.Admitted {
		t.Fatalf("Admit past the reservations = %+v, %v; want admitted", d, err)
	}
	if e := expiry(); e%2 != 0 {
		t.Fatalf("expiry %d is still odd with nothing ahead", e)
	}
}
