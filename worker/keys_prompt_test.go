package worker_test

import (
	"fmt"
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
						if started > 300*time.Millisecond {
							t.Errorf("task %s (%s) started %v after its enqueue, want at once beside the %s key", id, d.Outcome, started, how)
						}
						time.Sleep(100 * time.Millisecond)
					}
				}
			}
		})
	}
}
