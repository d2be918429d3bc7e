package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
)

// locate reads task id's place in queue "default", failing the test on an
// error.
func (s *stack) locate(id string) dispatch.Place {
	s.t.Helper()
	p, err := dispatch.New(s.rdb, s.gate, nil).Locate(context.Background(), "default", id)
	if err != nil {
		s.t.Fatalf("Locate(%q): %v", id, err)
	}
	return p
}

// A capped tenant's waiting tasks are found in its line, in order, held by
// the cap; the task that holds the cap is in flight in asynq's hands; and
// once no worker with a gate serves the queue, that is what holds them.
func TestLocateWaitingBehindTheCap(t *testing.T) {
	s := newStack(t, capped1)
	hold, err := dispatch.New(s.rdb, s.gate, nil).Serve(dispatch.Worker{Queues: []string{"default"}, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hold.Close)
	time.Sleep(1100 * time.Millisecond) // producers see the worker
	if d := s.put("acme", "a", "10ms"); d.Outcome != admission.Admitted {
		t.Fatalf("a: %v, want admitted", d.Outcome)
	}
	for _, id := range []string{"b", "c"} {
		if d := s.put("acme", id, "10ms"); d.Outcome != admission.Parked {
			t.Fatalf("%s: %v, want parked behind a (cap 1)", id, d.Outcome)
		}
	}

	a := s.locate("a")
	if a.Where != dispatch.InFlight || a.Stage != dispatch.StageQueued || a.Tenant != "acme" || a.TaskState != "pending" ||
		a.InFlight != 1 || a.Cap != 1 || a.Parked {
		t.Errorf("a = %+v, want in flight, pending in asynq, 1/1 for acme", a)
	}
	for i, id := range []string{"b", "c"} {
		p := s.locate(id)
		if p.Where != dispatch.Waiting || p.Reason != dispatch.ReasonCap || p.Tenant != "acme" || p.Position != i+1 ||
			p.TenantWaiting != 2 || p.InFlight != 1 || p.Cap != 1 || p.TaskState != "scheduled" || !p.Parked || !p.Served || p.Fair {
			t.Errorf("%s = %+v, want waiting %d of 2 in acme's line, at its cap 1/1, parked", id, p, i+1)
		}
		if why := p.Why(); !strings.Contains(why, "at its cap (1/1 in flight)") {
			t.Errorf("%s: Why() = %q, want the cap named", id, why)
		}
	}
	if got := dispatch.ParkedWhy(s.locate("b"), nil); !strings.HasPrefix(got, "parked: the tenant is at its cap") {
		t.Errorf("ParkedWhy(b) = %q", got)
	}
	if got := dispatch.ParkedWhy(dispatch.Place{}, errors.New("down")); got != "parked: waits its turn in the queue" {
		t.Errorf("ParkedWhy on a failed reading = %q, want the neutral reason", got)
	}

	paused := capped1
	paused.Paused = true
	s.setQuota("acme", paused)
	// The pause reaches the dispatcher with acme's next task (or finish).
	if d := s.put("acme", "d", "10ms"); d.Outcome != admission.Parked {
		t.Fatalf("d of paused acme: %v, want parked", d.Outcome)
	}
	for _, id := range []string{"c", "d"} {
		p := s.locate(id)
		if p.Reason != dispatch.ReasonPaused || !p.Paused || !strings.HasPrefix(dispatch.ParkedWhy(p, nil), "parked: the tenant is paused") {
			t.Errorf("%s of a paused tenant = %+v, want held by the pause", id, p)
		}
	}
	s.setQuota("acme", capped1)
	s.put("acme", "e", "10ms")
	if p := s.locate("c"); p.Reason != dispatch.ReasonCap || p.Paused {
		t.Errorf("c after the resume = %+v, want held by the cap again", p)
	}

	_, err = dispatch.New(s.rdb, s.gate, nil).Locate(context.Background(), "default", "nobody")
	if !errors.Is(err, dispatch.ErrTaskNotFound) {
		t.Errorf("Locate(nobody) = %v, want ErrTaskNotFound", err)
	}

	hold.Close()
	if p := s.locate("b"); p.Where != dispatch.Waiting || p.Reason != dispatch.ReasonUnserved || p.Served {
		t.Errorf("b with no worker = %+v, want waiting, unserved", p)
	}
}

// A tenant whose waiting task the gate refused at its grant sleeps on its
// rate, and Locate says until when.
func TestLocateAsleepOnTheRate(t *testing.T) {
	s := newStack(t, admission.Quota{Limit: 2, Window: 20 * time.Second, MaxDelay: time.Minute, MaxInFlight: 1})
	s.startWorker(2, false)
	time.Sleep(1100 * time.Millisecond)
	s.put("acme", "a", "block")
	eventually(t, 5*time.Second, "a starts", func() bool { return s.ran("a") == 1 })
	start := time.Now()
	for _, id := range []string{"b", "c"} {
		if d := s.put("acme", id, "10ms"); d.Outcome != admission.Parked {
			t.Fatalf("%s: %v, want parked behind a (cap 1)", id, d.Outcome)
		}
	}
	s.unblock("a")
	eventually(t, 5*time.Second, "b runs", func() bool { return s.ran("b") == 1 })
	var c dispatch.Place
	eventually(t, 5*time.Second, "c is held by the rate", func() bool {
		c = s.locate("c")
		return c.Reason == dispatch.ReasonRate
	})
	// a's slot was taken before start, so c's wakes within the window of it.
	if c.Where != dispatch.Waiting || c.Position != 1 || c.Until.Before(start) || c.Until.After(start.Add(21*time.Second)) {
		t.Errorf("c = %+v, want first in line, asleep until a's slot leaves the 20s window", c)
	}
	if why := c.Why(); !strings.Contains(why, "held by its rate until") {
		t.Errorf("c: Why() = %q", why)
	}
}

// In a fair queue that is full, a waiting task waits its turn for space;
// a task for later waits aside in limbo; a waiting task deleted from
// outside is set aside in limbo at its turn, as missing.
func TestLocateFullQueueAndLimbo(t *testing.T) {
	s := newStack(t, generous)
	s.startWorker(1, true)
	time.Sleep(1100 * time.Millisecond) // producers see the fair worker
	s.put("x", "x1", "block")
	eventually(t, 5*time.Second, "x1 starts", func() bool { return s.ran("x1") == 1 })
	xs := []string{"x1"}
	for i := 2; ; i++ { // fill the queue's room
		id := fmt.Sprintf("x%d", i)
		xs = append(xs, id)
		if d := s.put("x", id, "block"); d.Outcome == admission.Parked {
			break
		} else if i > 10 {
			t.Fatalf("x's tasks went in up to %s: the fair queue of one worker has no bound", id)
		}
	}
	defer func() {
		for _, id := range xs[1:] {
			s.unblock(id)
		}
	}()
	for _, id := range []string{"t1", "t2"} {
		if d := s.put("t", id, "10ms"); d.Outcome != admission.Parked {
			t.Fatalf("%s: %v, want parked in the full queue", id, d.Outcome)
		}
	}
	s.put("t", "later", "10ms", asynq.ProcessIn(time.Hour))

	p := s.locate("t2")
	if p.Where != dispatch.Waiting || p.Reason != dispatch.ReasonFull || p.Position != 2 || p.Room > 0 || !p.Fair || p.Tenant != "t" {
		t.Errorf("t2 = %+v, want second in t's line, the fair queue full", p)
	}
	if got := dispatch.ParkedWhy(p, nil); !strings.Contains(got, "waits its turn in a fair queue") {
		t.Errorf("ParkedWhy(t2) = %q", got)
	}
	later := s.locate("later")
	if later.Where != dispatch.Limbo || later.Reason != dispatch.ReasonLater || later.Tenant != "t" ||
		later.NotBefore.Before(time.Now().Add(59*time.Minute)) || !later.Parked {
		t.Errorf("later = %+v, want in limbo until its start an hour ahead", later)
	}

	if err := s.ins.DeleteTask("default", "t1"); err != nil {
		t.Fatal(err)
	}
	s.unblock("x1")
	var gone dispatch.Place
	eventually(t, 5*time.Second, "deleted t1 is set aside", func() bool {
		p, err := dispatch.New(s.rdb, s.gate, nil).Locate(context.Background(), "default", "t1")
		gone = p
		return err == nil && p.Where == dispatch.Limbo
	})
	if gone.Reason != dispatch.ReasonMissing || gone.Tenant != "t" || gone.TaskState != "" || !gone.Until.After(gone.Now.Add(-time.Second)) {
		t.Errorf("t1 = %+v, want missing in limbo, t's", gone)
	}
	if why := gone.Why(); !strings.Contains(why, "in limbo: asynq does not hold the task") {
		t.Errorf("t1: Why() = %q", why)
	}
}

// A task waits in one of its tenant's flows (its priority and keys), and
// Locate finds it there: its place in its flow, the flows ahead of it, and
// the key that holds it, paused before throttled before full; a task in
// flight names its keys, and one in limbo its flow.
func TestLocateFlowsAndKeys(t *testing.T) {
	s := newStack(t, generous)
	s.setKey("api", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
	s.setKey("pz", admission.Quota{Limit: admission.NoLimit, Paused: true})
	s.setQuota("c", capped1)
	hold, err := dispatch.New(s.rdb, s.gate, nil).Serve(dispatch.Worker{Queues: []string{"default"}, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hold.Close)
	time.Sleep(1100 * time.Millisecond) // producers see the worker

	if d := s.put("a", "k1", "10ms", enqueue.Keys("api")); d.Outcome != admission.Admitted {
		t.Fatalf("k1: %v, want admitted (key api has room)", d.Outcome)
	}
	for _, p := range []struct {
		id   string
		opts []asynq.Option
	}{
		{"k2", []asynq.Option{enqueue.Keys("api")}},
		{"k3", []asynq.Option{enqueue.Keys("api"), enqueue.Priority(5)}},
		{"k4", []asynq.Option{enqueue.Keys("api"), enqueue.Priority(5)}},
		{"k5", []asynq.Option{enqueue.Keys("db", "api")}},
		{"z1", []asynq.Option{enqueue.Keys("pz")}},
		{"z2", []asynq.Option{enqueue.Keys("api", "pz")}},
	} {
		if d := s.put("a", p.id, "10ms", p.opts...); d.Outcome != admission.Parked {
			t.Fatalf("%s: %v, want parked on its key", p.id, d.Outcome)
		}
	}
	// a's task without keys is not held: the queue does not hold it.
	if d := s.put("a", "free", "10ms"); d.Outcome != admission.Admitted {
		t.Fatalf("free: %v, want admitted", d.Outcome)
	}

	k1 := s.locate("k1")
	if k1.Where != dispatch.InFlight || len(k1.Keys) != 1 || k1.Keys[0].Key != "api" || k1.Keys[0].InFlight != 1 ||
		k1.Keys[0].Cap != 1 || !k1.Keys[0].AtCap || k1.Keys[0].Waiting != 5 {
		t.Errorf("k1 = %+v, want in flight, holding key api's one place with 5 waiting on it", k1)
	}
	if f := s.locate("free"); f.Where != dispatch.NotHeld {
		t.Errorf("free = %+v, want not held", f)
	}
	for _, tc := range []struct {
		id                                string
		reason                            dispatch.Reason
		key                               string
		prio, pos, flowWaiting, flowAhead int
		keys                              []string
	}{
		{"k3", dispatch.ReasonKeyCap, "api", 5, 1, 2, 0, []string{"api"}},
		{"k4", dispatch.ReasonKeyCap, "api", 5, 2, 2, 0, []string{"api"}},
		{"k2", dispatch.ReasonKeyCap, "api", 0, 1, 1, 1, []string{"api"}},
		{"k5", dispatch.ReasonKeyCap, "api", 0, 1, 1, 2, []string{"api", "db"}},
		{"z1", dispatch.ReasonKeyPaused, "pz", 0, 1, 1, 3, []string{"pz"}},
		{"z2", dispatch.ReasonKeyPaused, "pz", 0, 1, 1, 4, []string{"api", "pz"}},
	} {
		p := s.locate(tc.id)
		var keys []string
		for _, ks := range p.Keys {
			keys = append(keys, ks.Key)
		}
		if p.Where != dispatch.Waiting || p.Reason != tc.reason || p.Key != tc.key || p.Priority != tc.prio ||
			p.Position != tc.pos || p.FlowWaiting != tc.flowWaiting || p.FlowsAhead != tc.flowAhead ||
			p.TenantWaiting != 6 || p.Tenant != "a" || !p.Parked || !slices.Equal(keys, tc.keys) {
			t.Errorf("%s = %+v, want waiting on key %s (%v), priority %d, %d of %d in its flow, %d flows ahead, 6 waiting in all, keys %v",
				tc.id, p, tc.key, tc.reason, tc.prio, tc.pos, tc.flowWaiting, tc.flowAhead, tc.keys)
		}
	}
	if why := dispatch.ParkedWhy(s.locate("k2"), nil); !strings.HasPrefix(why, `parked: its key "api" is at its cap (1/1 in flight across tenants)`) {
		t.Errorf("ParkedWhy(k2) = %q, want key api's cap named", why)
	}
	if why := s.locate("z2").Why(); !strings.Contains(why, `its key "pz" is paused`) {
		t.Errorf("z2: Why() = %q, want key pz's pause named", why)
	}
	if why := s.locate("k4").Why(); why == "" || !strings.Contains(why, "key") {
		t.Errorf("k4: Why() = %q", why)
	}

	// A throttle on k1's key holds api's tasks until it lifts; it is
	// named before api's cap, after pz's pause.
	before := time.Now()
	hold.ThrottledKey("default", "a", "k1", "api", time.Millisecond, 30*time.Second)
	var k2 dispatch.Place
	eventually(t, 5*time.Second, "the throttle holds key api", func() bool {
		k2 = s.locate("k2")
		return k2.Reason == dispatch.ReasonKeyHeld
	})
	if k2.Key != "api" || k2.Until.Before(before.Add(29*time.Second)) || k2.Until.After(time.Now().Add(31*time.Second)) ||
		!k2.Keys[0].Held || !k2.Keys[0].HeldUntil.Equal(k2.Until) {
		t.Errorf("k2 = %+v, want held on key api for 30s", k2)
	}
	if why := k2.Why(); !strings.Contains(why, `its key "api" is held by a downstream throttle`) {
		t.Errorf("k2: Why() = %q", why)
	}
	if z2 := s.locate("z2"); z2.Reason != dispatch.ReasonKeyPaused || z2.Key != "pz" {
		t.Errorf("z2 = %+v, want its paused key named before its held one", z2)
	}

	// Priority within a capped tenant: its flows go by priority, then age.
	if d := s.put("c", "c1", "10ms"); d.Outcome != admission.Admitted {
		t.Fatalf("c1: %v, want admitted", d.Outcome)
	}
	for _, p := range []struct {
		id   string
		prio int
	}{{"c2", 0}, {"c3", 7}, {"c4", -2}, {"c5", 0}} {
		if d := s.put("c", p.id, "10ms", enqueue.Priority(p.prio)); d.Outcome != admission.Parked {
			t.Fatalf("%s: %v, want parked behind c's cap", p.id, d.Outcome)
		}
	}
	for _, tc := range []struct {
		id                                string
		prio, pos, flowWaiting, flowAhead int
	}{{"c3", 7, 1, 1, 0}, {"c2", 0, 1, 2, 1}, {"c5", 0, 2, 2, 1}, {"c4", -2, 1, 1, 2}} {
		p := s.locate(tc.id)
		if p.Where != dispatch.Waiting || p.Reason != dispatch.ReasonCap || p.Priority != tc.prio || p.Position != tc.pos ||
			p.FlowWaiting != tc.flowWaiting || p.FlowsAhead != tc.flowAhead || p.TenantWaiting != 4 || len(p.Keys) != 0 || p.Key != "" {
			t.Errorf("%s = %+v, want held by c's cap, priority %d, %d of %d in its flow, %d flows ahead", tc.id, p, tc.prio, tc.pos, tc.flowWaiting, tc.flowAhead)
		}
	}

	// A keyed task for later waits in limbo with its flow.
	if d := s.put("c", "later", "10ms", enqueue.Keys("api"), enqueue.Priority(3), asynq.ProcessIn(time.Hour)); d.Outcome != admission.Parked {
		t.Fatalf("later: %v, want parked", d.Outcome)
	}
	later := s.locate("later")
	if later.Where != dispatch.Limbo || later.Reason != dispatch.ReasonLater || later.Tenant != "c" || later.Priority != 3 ||
		len(later.Keys) != 1 || later.Keys[0].Key != "api" {
		t.Errorf("later = %+v, want in limbo until its start, priority 3, key api", later)
	}
}
