package admission

import (
	"context"
	"testing"
	"time"
)

// TestDenyCacheProbe: once a cached rejection runs out, one request goes
// to Redis (the probe) and the requests that come during its round trip
// wait for its answer instead of racing it there: answered by the new
// rejection it brings back; sent to Redis when it brings none, or never
// answers, or a Release forgets the tenant; let go when their context
// ends.
func TestDenyCacheProbe(t *testing.T) {
	q := Quota{Limit: 1, Window: time.Second}
	const tenant = "t"
	// ranOut caches a rejection that ran out a moment ago, and makes the
	// request that finds it so the probe.
	ranOut := func(t *testing.T, c *denyCache) {
		t.Helper()
		srv := time.Now()
		c.put(denyKey{tenant, q, 1}, []Decision{{Now: srv}}, srv.Add(time.Millisecond), time.Now(), c.generation(tenant))
		if _, ok, _ := c.lookup(t.Context(), denyKey{tenant, q, 1}, time.Now(), true); !ok {
			t.Fatal("a fresh rejection was not answered from the cache")
		}
		time.Sleep(2 * time.Millisecond)
		if _, ok, _ := c.lookup(t.Context(), denyKey{tenant, q, 1}, time.Now(), true); ok {
			t.Fatal("a rejection that ran out still answered")
		}
	}
	type answer struct {
		d  denial
		ok bool
	}
	// waiter looks the tenant up in the background, and checks that it
	// waits for the probe.
	waiter := func(t *testing.T, ctx context.Context, c *denyCache) chan answer {
		t.Helper()
		ch := make(chan answer, 1)
		go func() {
			d, ok, _ := c.lookup(ctx, denyKey{tenant, q, 1}, time.Now(), true)
			ch <- answer{d, ok}
		}()
		select {
		case a := <-ch:
			t.Fatalf("a request during the probe did not wait for it: %+v", a)
		case <-time.After(30 * time.Millisecond):
		}
		return ch
	}

	t.Run("answered by the probe's rejection", func(t *testing.T) {
		c := newDenyCache(10, time.Minute)
		ranOut(t, c)
		ch := waiter(t, t.Context(), c)
		srv := time.Now()
		c.put(denyKey{tenant, q, 1}, []Decision{{Now: srv}}, srv.Add(time.Minute), time.Now(), c.generation(tenant))
		if a := <-ch; !a.ok || !a.d.at.Equal(srv.Add(time.Minute)) {
			t.Fatalf("waiter = %+v, want the probe's rejection", a)
		}
	})
	t.Run("to Redis when the probe found room for all", func(t *testing.T) {
		c := newDenyCache(10, time.Minute)
		ranOut(t, c)
		ch := waiter(t, t.Context(), c)
		c.put(denyKey{tenant, q, 1}, []Decision{{Now: time.Now(), Outcome: Admitted, Remaining: 2}}, time.Time{}, time.Now(), c.generation(tenant))
		if a := <-ch; a.ok {
			t.Fatalf("waiter = %+v, want it sent to Redis", a)
		}
		if _, ok, _ := c.lookup(t.Context(), denyKey{tenant, q, 1}, time.Now(), true); ok {
			t.Fatal("the run-out rejection outlived the probe")
		}
	})
	t.Run("to Redis when the probe got no answer", func(t *testing.T) {
		c := newDenyCache(10, time.Minute)
		ranOut(t, c)
		ch := waiter(t, t.Context(), c)
		c.put(denyKey{tenant, q, 1}, nil, time.Time{}, time.Now(), c.generation(tenant))
		if a := <-ch; a.ok {
			t.Fatalf("waiter = %+v, want it sent to Redis", a)
		}
	})
	t.Run("one by one while the room is short", func(t *testing.T) {
		c := newDenyCache(10, time.Minute)
		ranOut(t, c)
		first, second := waiter(t, t.Context(), c), waiter(t, t.Context(), c)
		// Room for one more, two waiting: one goes as the next probe.
		c.put(denyKey{tenant, q, 1}, []Decision{{Now: time.Now(), Outcome: Admitted, Remaining: 1}}, time.Time{}, time.Now(), c.generation(tenant))
		var still chan answer
		select {
		case a := <-first:
			still = second
			if a.ok {
				t.Fatalf("first waiter = %+v, want it sent to Redis", a)
			}
		case a := <-second:
			still = first
			if a.ok {
				t.Fatalf("second waiter = %+v, want it sent to Redis", a)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no waiter went on as the next probe")
		}
		select {
		case a := <-still:
			t.Fatalf("both waiters went to Redis for room for one: %+v", a)
		case <-time.After(30 * time.Millisecond):
		}
		// The next probe fills the window: the other is answered by it.
		srv := time.Now()
		c.put(denyKey{tenant, q, 1}, []Decision{{Now: srv}}, srv.Add(time.Minute), time.Now(), c.generation(tenant))
		if a := <-still; !a.ok {
			t.Fatalf("waiter = %+v, want the next probe's rejection", a)
		}
	})
	t.Run("a tenant near full is paced", func(t *testing.T) {
		c := newDenyCache(10, time.Minute)
		// Room for one more, and nothing cached: the next request goes,
		// and the one after waits for its answer.
		c.put(denyKey{tenant, q, 1}, []Decision{{Now: time.Now(), Outcome: Admitted, Remaining: 1}}, time.Time{}, time.Now(), c.generation(tenant))
		if _, ok, _ := c.lookup(t.Context(), denyKey{tenant, q, 1}, time.Now(), true); ok {
			t.Fatal("a request with room was answered locally")
		}
		ch := waiter(t, t.Context(), c)
		srv := time.Now()
		c.put(denyKey{tenant, q, 1}, []Decision{{Now: srv, Outcome: Admitted}}, srv.Add(time.Minute), time.Now(), c.generation(tenant))
		if a := <-ch; !a.ok {
			t.Fatalf("waiter = %+v, want the rejection the last slot brought", a)
		}
	})
	t.Run("a tenant far from full is not", func(t *testing.T) {
		c := newDenyCache(10, time.Minute)
		c.put(denyKey{tenant, q, 1}, []Decision{{Now: time.Now(), Outcome: Admitted, Remaining: 1}}, time.Time{}, time.Now(), c.generation(tenant))
		c.put(denyKey{tenant, q, 1}, []Decision{{Now: time.Now(), Outcome: Admitted, Remaining: nearFull}}, time.Time{}, time.Now(), c.generation(tenant))
		for range 3 {
			if _, ok, _ := c.lookup(t.Context(), denyKey{tenant, q, 1}, time.Now(), true); ok {
				t.Fatal("a request with room was answered locally")
			}
		}
		if len(c.entries) != 0 {
			t.Fatalf("the cache holds %v for a tenant with room", c.entries)
		}
	})
	t.Run("to Redis when a Release forgets", func(t *testing.T) {
		c := newDenyCache(10, time.Minute)
		ranOut(t, c)
		ch := waiter(t, t.Context(), c)
		c.forget(tenant)
		if a := <-ch; a.ok {
			t.Fatalf("waiter = %+v, want it sent to Redis", a)
		}
	})
	t.Run("becomes the probe when the probe is overdue", func(t *testing.T) {
		c := newDenyCache(10, 100*time.Millisecond)
		ranOut(t, c)
		ch := waiter(t, t.Context(), c)
		select {
		case a := <-ch:
			if a.ok {
				t.Fatalf("waiter = %+v, want it sent to Redis", a)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter outwaited the overdue probe")
		}
	})
	t.Run("let go when its context ends", func(t *testing.T) {
		c := newDenyCache(10, time.Minute)
		ranOut(t, c)
		ctx, cancel := context.WithCancel(t.Context())
		ch := waiter(t, ctx, c)
		cancel()
		select {
		case a := <-ch:
			if a.ok {
				t.Fatalf("waiter = %+v, want no answer", a)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter outlived its context")
		}
	})
}
