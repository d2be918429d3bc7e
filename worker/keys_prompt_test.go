package worker_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
)

// A tenant whose tasks wait on a held key (throttled or paused) has its
// tasks without the key go in as soon as a worker is free: four idle
// workers and nothing in their way, the dispatcher grants within a few of
// its 50 ms turns, not at its 1 s idle tick. (Behind the build tag
// admitq_dispatch_prompt while it fails: such tasks park, and nothing wakes
// the dispatcher's loop before its idle tick, 0.5 to 1 s later.)
func TestTasksBesideAHeldKeyGoInPromptly(t *testing.T) {
	for _, how := range []string{"throttled", "paused"} {
		t.Run(how, func(t *testing.T) {
			s := newKeyStack(t)
			if how == "paused" {
				s.setKey("api", admission.Quota{Limit: admission.NoLimit, Paused: true})
			}
			s.startWorker(4)
			if how == "throttled" {
				s.put("a", "throttled", "throttle-key:api:5s", enqueue.Keys("api"))
				poll(t, "the throttled task to run", func() bool { return s.ran("throttled") == 1 })
			}
			for _, tenant := range []string{"a", "b"} {
				s.put(tenant, tenant+"-api", "1ms", enqueue.Keys("api"))
			}
			// Let the dispatcher's loop settle into its idle wait.
			time.Sleep(1500 * time.Millisecond)
			var waits []time.Duration // from each enqueue to its start
			var slowest string
			for i := range 4 {
				for _, tenant := range []string{"a", "b"} {
					for _, opts := range [][]asynq.Option{nil, {enqueue.Keys("other")}} {
						id := fmt.Sprintf("%s-%d-%d", tenant, i, len(opts))
						at := time.Now()
						d := s.put(tenant, id, "1ms", opts...)
						s.waitRuns([]string{id}, 5*time.Second)
						s.mu.Lock()
						started := s.startAt[id][0].Sub(at)
						s.mu.Unlock()
						if len(waits) == 0 || started > slices.Max(waits) {
							slowest = fmt.Sprintf("task %s (%s)", id, d.Outcome)
						}
						waits = append(waits, started)
						time.Sleep(100 * time.Millisecond)
					}
				}
			}
			// The defect held every task back, to the idle tick; a
			// scheduler's stall delays one. So the second slowest counts.
			slices.Sort(waits)
			t.Logf("from enqueue to start: median %v, slowest %v (%s)", waits[len(waits)/2], waits[len(waits)-1], slowest)
			if w := waits[len(waits)-2]; w > 300*time.Millisecond {
				t.Errorf("the second slowest task started %v after its enqueue, want at once beside the %s key: %v", w, how, waits)
			}
		})
	}
}
