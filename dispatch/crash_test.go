package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/admitq/admitq/dispatch"
)

// A dispatcher that dies between granting tasks and moving them in loses
// none and runs none twice: another worker's repair pass admits and moves
// the orphaned grants (the admission is idempotent on the task ID, the
// move checks asynq's state), after the grace a live mover has.
func TestGrantsOfADeadDispatcherAreFinished(t *testing.T) {
	s := newStack(t, capped1)
	hold, err := dispatch.New(s.rdb, s.gate, nil).Serve(dispatch.Worker{Queues: []string{"default"}, Concurrency: 4, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing runs: a is in flight, b and c wait.
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		s.put("t", id, "10ms")
	}
	hold.Close()
	// a "finishes" on a worker that dies right after its turn granted b:
	// fake its finish through the queue's state, then grant without moving.
	ctx := context.Background()
	if err := s.ins.DeleteTask("default", "a"); err != nil {
		t.Fatal(err)
	}
	d := dispatch.New(s.rdb, s.gate, nil)
	eventually(t, 10*time.Second, "a repair frees a's place", func() bool {
		d.RepairForTest(ctx, "default")
		n, err := d.GrantAndDie(ctx, "default", 1)
		return err == nil && n == 1
	})
	start := time.Now()
	s.startWorker(2, true)
	s.waitRuns([]string{"b", "c"}, 3*dispatch.Grace+5*time.Second)
	t.Logf("the dead dispatcher's grant ran %v after a new worker started (grace %v)", time.Since(start).Round(time.Millisecond), dispatch.Grace)
	if s.ran("a") != 0 {
		t.Errorf("a, deleted from outside, ran %d times", s.ran("a"))
	}
}
