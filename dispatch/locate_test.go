package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
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
