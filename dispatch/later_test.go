package dispatch_test

import (
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// A capped tenant's task scheduled for later (ProcessIn 1h) holds no place
// under the cap while it waits for its time: the tenant's task for now
// runs at once.
func TestATaskForLaterHoldsNoPlace(t *testing.T) {
	s := newStack(t, capped1)
	s.startWorker(2, false)
	d := s.put("t", "later", "10ms", asynq.ProcessIn(time.Hour))
	t.Logf("later: %v", d.Outcome)
	d = s.put("t", "now", "10ms")
	t.Logf("now: %v", d.Outcome)
	time.Sleep(3 * time.Second)
	if s.ran("now") == 0 {
		t.Errorf("a task for now waits behind the tenant's task scheduled in an hour (cap 1): it holds the permit while merely scheduled")
	}
}

// In a fair queue, a waiting task with its own ProcessIn(1h) waits for its
// time aside, not at the head of its tenant's line: the tenant's tasks for
// now go in at their turn.
func TestATaskForLaterHoldsNoOneBack(t *testing.T) {
	s := newStack(t, generous)
	s.startWorker(1, true)
	time.Sleep(1100 * time.Millisecond) // producers see the fair worker
	s.put("x", "x1", "block")
	eventually(t, 5*time.Second, "x1 starts", func() bool { return s.ran("x1") == 1 })
	s.put("x", "x2", "block") // fills room (2 × 1)
	d := s.put("t", "later", "10ms", asynq.ProcessIn(time.Hour))
	t.Logf("later: %v", d.Outcome)
	d = s.put("t", "now", "10ms")
	t.Logf("now: %v", d.Outcome)
	s.unblock("x1")
	s.unblock("x2")
	time.Sleep(3 * time.Second)
	if s.ran("now") == 0 {
		t.Errorf("t's task for now waits behind t's task scheduled in an hour")
	}
}
