package dispatch_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/lua"
)

// releaseCounter counts the calls of counter_release.lua, the script with
// which the gate gives back a Counter-mode slot (Gate.Release). The script
// is loaded first, so the gate always calls it by its hash (EVALSHA).
type releaseCounter struct {
	hash string
	n    atomic.Int64
}

func (r *releaseCounter) note(cmd redis.Cmder) {
	if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 1 && args[1] == r.hash {
		r.n.Add(1)
	}
}

func (r *releaseCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *releaseCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.note(cmd)
		return next(ctx, cmd)
	}
}

func (r *releaseCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			r.note(cmd)
		}
		return next(ctx, cmds)
	}
}

// withCountedReleases puts a gate on a client of its own, which counts
// the gate's Counter-mode releases, in place of s's gate, for the
// producer and the workers started after it.
func (s *stack) withCountedReleases() *releaseCounter {
	s.t.Helper()
	script := lua.CounterRelease()
	if err := script.Load(context.Background(), s.rdb).Err(); err != nil {
		s.t.Fatal(err)
	}
	rc := &releaseCounter{hash: script.Hash()}
	rdb := s.srv.Client(s.t)
	rdb.AddHook(rc)
	gate := admission.New(rdb, s.quotas, admission.WithTimeout(2*time.Second))
	s.t.Cleanup(func() { gate.Close() })
	s.gate = gate
	s.client = enqueue.NewFromRedis(rdb, gate)
	return rc
}

// A cap holds in Counter mode as in Log mode: the dispatcher counts the
// tenant's tasks in flight by task ID in its own books, admits each grant
// through the gate and gives back, with Release, the slot of one the rate
// puts off. So a capped Counter-mode tenant never runs more than its cap
// at once, and every task runs exactly once, in a fair queue and in a
// plain dispatched one, with a rate that never binds, one that puts
// grants off (the Release path), and none at all (NoLimit).
func TestCounterModeCapHolds(t *testing.T) {
	const tenant, tasks, maxInFlight = "c", 30, 2
	for _, c := range []struct {
		desc string
		q    admission.Quota
		fair bool
		run  time.Duration
		// deferred: the rate puts grants off, so the gate must release
		// their slots, and at most Limit go in in any Window.
		deferred bool
	}{
		{"a rate that never binds, fair queue", admission.Quota{Limit: 1000, Window: time.Second, Mode: admission.Counter, MaxInFlight: maxInFlight}, true, 20 * time.Millisecond, false},
		{"a rate that never binds, plain queue", admission.Quota{Limit: 1000, Window: time.Second, Mode: admission.Counter, MaxInFlight: maxInFlight}, false, 20 * time.Millisecond, false},
		{"a rate that puts grants off, fair queue", admission.Quota{Limit: 5, Window: 200 * time.Millisecond, MaxDelay: 2 * time.Second, Mode: admission.Counter, MaxInFlight: maxInFlight}, true, 5 * time.Millisecond, true},
		{"a rate that puts grants off, plain queue", admission.Quota{Limit: 5, Window: 200 * time.Millisecond, MaxDelay: 2 * time.Second, Mode: admission.Counter, MaxInFlight: maxInFlight}, false, 5 * time.Millisecond, true},
		{"no rate limit, fair queue", admission.Quota{Limit: admission.NoLimit, Mode: admission.Counter, MaxInFlight: maxInFlight}, true, 20 * time.Millisecond, false},
	} {
		t.Run(c.desc, func(t *testing.T) {
			if err := c.q.Validate(); err != nil {
				t.Fatalf("Validate(%v) = %v; a cap in counter mode is valid", c.q, err)
			}
			s := newStack(t, generous)
			rc := s.withCountedReleases()
			s.setQuota(tenant, c.q)
			s.startWorker(8, c.fair)
			ids := s.enqueue(tenant, tasks, c.run)
			s.waitRuns(ids, 30*time.Second)
			time.Sleep(300 * time.Millisecond) // a second run would show by now
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, id := range ids {
				if n := s.runs[id]; n != 1 {
					t.Errorf("task %s ran %d times, want once", id, n)
				}
			}
			if p := s.peak[tenant]; p > maxInFlight {
				t.Errorf("capped at %d in counter mode, the tenant ran %d tasks at once", maxInFlight, p)
			} else if !c.deferred && p != maxInFlight {
				t.Errorf("capped at %d in counter mode, the tenant ran at most %d at once; want exactly %d (the cap, and busy)", maxInFlight, p, maxInFlight)
			}
			if !c.deferred {
				return
			}
			if n := rc.n.Load(); n == 0 {
				t.Errorf("the rate (%v) put no grant off: the dispatcher never gave a slot back, so the test proves nothing of Release", c.q)
			} else {
				t.Logf("the gate gave back %d Counter-mode slots of grants the rate put off", n)
			}
			// Every task goes in charged: at most Limit in any Window, and
			// the starts lag the admissions by no more than the tasks in
			// flight, so at most Limit + MaxInFlight start in any Window.
			var starts []time.Time
			for _, e := range s.started {
				if e.tenant == tenant {
					starts = append(starts, e.at)
				}
			}
			slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
			most := 0
			for i := range starts {
				j := i
				for j < len(starts) && starts[j].Sub(starts[i]) < c.q.Window {
					j++
				}
				most = max(most, j-i)
			}
			t.Logf("at most %d starts in a window of %v; %d starts over %v", most, c.q.Window, len(starts), starts[len(starts)-1].Sub(starts[0]))
			if most > c.q.Limit+maxInFlight {
				t.Errorf("%d tasks started within one window of %v; want at most %d (Limit %d, and %d in flight)", most, c.q.Window, c.q.Limit+maxInFlight, c.q.Limit, maxInFlight)
			}
			// 30 tasks at 5 a window of 200ms span at least 5 windows.
			if span, least := starts[len(starts)-1].Sub(starts[0]), time.Duration(tasks/c.q.Limit-1)*c.q.Window*8/10; span < least {
				t.Errorf("%d tasks at %d per %v started within %v; want at least %v", tasks, c.q.Limit, c.q.Window, span, least)
			}
		})
	}
}
