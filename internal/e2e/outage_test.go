//go:build unix

package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// Enqueue while Redis goes away. Producers flood enqueue.Client.Enqueue
// with distinct task IDs while the test freezes Redis (TestEnqueueDuringOutage)
// or kills it (TestEnqueueAcrossKill), and counts what became of every call.
//
// These tests are not parallel with the others: they measure latencies.

const (
	outageWorkers = 24
	outageTenants = 4
	// outagePace is each producer's pause between calls, so that 24 of them
	// do not spin two shared CPUs flat out.
	outagePace = 5 * time.Millisecond
	// outageMargin is what a call may take beyond the sum of the timeouts
	// in its way: scheduling on two loaded CPUs under -race.
	outageMargin = 750 * time.Millisecond
)

// outageQuota admits 50 a minute per tenant and defers the rest minutes
// ahead, so the flood puts tasks in the pending list and in the scheduled
// set, and every slot taken during a test stays in its tenant's log, which
// accountForTasks compares with the queue.
var outageQuota = admission.Quota{Limit: 50, Window: time.Minute, MaxDelay: 10 * time.Minute}

// call is one Enqueue of a flood.
type call struct {
	id, tenant string
	start, end time.Time
	d          admission.Decision
	err        error
}

func (c call) took() time.Duration { return c.end.Sub(c.start) }

// What became of a call, by its Decision and error.
type fate int

const (
	enqueued fate = iota
	// refused: the gate rejected the task, or could not ask Redis
	// (ErrUnavailable, with a zero Decision); asynq was never called.
	refused
	// conflict: asynq said the task ID is taken: an earlier attempt of this
	// same call, which go-redis retried after a timeout, reached the queue.
	conflict
	// asynqFailed: asynq's Redis call failed (timed out, refused). Whether
	// it reached Redis is unknown to the caller.
	asynqFailed
	// unexplained: any other error; a test failure.
	unexplained
	fates
)

var fateNames = [fates]string{"enqueued", "refused", "conflict", "asynq-failed", "unexplained"}

// fateOf classifies c. The Decision tells whether asynq was called: it is
// the zero value when the gate failed, and Rejected when it said no. The
// error agrees: a failure after admission never matches
// admission.ErrUnavailable, even when the Release after it fails too.
func fateOf(c call) fate {
	switch {
	case c.err == nil:
		return enqueued
	case c.d.Tenant == "":
		if errors.Is(c.err, admission.ErrUnavailable) {
			return refused
		}
	case errors.Is(c.err, admission.ErrUnavailable):
		// asynq was called, yet the error claims the gate failed.
	case c.d.Outcome == admission.Rejected:
		if errors.Is(c.err, enqueue.ErrRejected) {
			return refused
		}
	case errors.Is(c.err, asynq.ErrTaskIDConflict):
		return conflict
	case isAsynqRedisError(c.err):
		return asynqFailed
	}
	return unexplained
}

// isAsynqRedisError reports whether err is a failed Redis call of asynq's,
// as enqueue returns it. asynq flattens Redis errors into text, so text is
// all there is to go on.
func isAsynqRedisError(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "enqueue: tenant ") &&
		(strings.Contains(msg, "redis eval error") || strings.Contains(msg, "redis command error"))
}

// enqueueFlood calls Enqueue from outageWorkers goroutines, each task with
// an ID of its own, until stopped, and records every call.
type enqueueFlood struct {
	s     *stack
	name  string
	stop  atomic.Bool
	wg    sync.WaitGroup
	ok    atomic.Int64 // calls that enqueued
	since atomic.Int64 // UnixNano; see okSince
	// okSince counts the calls begun after since that enqueued.
	okSince atomic.Int64

	mu    sync.Mutex
	calls []call
	panic []any
}

func (f *enqueueFlood) start() {
	for w := range outageWorkers {
		f.wg.Go(func() {
			defer func() {
				if v := recover(); v != nil {
					f.mu.Lock()
					f.panic = append(f.panic, v)
					f.mu.Unlock()
				}
			}()
			for i := 0; !f.stop.Load(); i++ {
				c := call{id: fmt.Sprintf("%s-%02d-%06d", f.name, w, i), tenant: fmt.Sprintf("t%d", (w+i)%outageTenants), start: time.Now()}
				_, c.d, c.err = f.s.enqueue(context.Background(), c.tenant, asynq.NewTask("work", nil), asynq.TaskID(c.id))
				c.end = time.Now()
				if c.err == nil {
					f.ok.Add(1)
					if c.start.UnixNano() > f.since.Load() {
						f.okSince.Add(1)
					}
				}
				f.mu.Lock()
				f.calls = append(f.calls, c)
				f.mu.Unlock()
				time.Sleep(outagePace)
			}
		})
	}
}

// mark starts counting okSince anew from now.
func (f *enqueueFlood) mark() time.Time {
	now := time.Now()
	f.okSince.Store(0)
	f.since.Store(now.UnixNano())
	return now
}

// waitOK waits until n calls begun since the last mark have enqueued.
func (f *enqueueFlood) waitOK(t *testing.T, n int64, what string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for f.okSince.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d calls enqueued in %v, want %d", what, f.okSince.Load(), waitLimit, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// finish stops the flood and waits for every call to return, or fails t
// after limit: a call that hangs is the failure these tests look for.
func (f *enqueueFlood) finish(t *testing.T, limit time.Duration) []call {
	t.Helper()
	f.stop.Store(true)
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("Enqueue calls still running %v after the flood stopped", limit)
	}
	for _, p := range f.panic {
		t.Errorf("Enqueue panicked: %v", p)
	}
	return f.calls
}

// outageReport is what a flood saw of an outage from down to back.
type outageReport struct {
	fates           [fates]int
	worstBefore     time.Duration // calls that ended before the outage
	worstDuring     time.Duration // calls that overlapped it
	worstAfter      time.Duration // calls begun after it
	worstCall       call
	recovery        time.Duration // from back to the end of the first call begun after it that enqueued
	local, unavail  int
	unexplainedErrs []error
}

func report(calls []call, down, back time.Time) outageReport {
	var r outageReport
	for _, c := range calls {
		f := fateOf(c)
		r.fates[f]++
		if f == unexplained && len(r.unexplainedErrs) < 5 {
			r.unexplainedErrs = append(r.unexplainedErrs, c.err)
		}
		if c.d.Local {
			r.local++
		}
		if errors.Is(c.err, admission.ErrUnavailable) {
			r.unavail++
		}
		switch {
		case c.end.Before(down):
			r.worstBefore = max(r.worstBefore, c.took())
		case c.start.After(back):
			r.worstAfter = max(r.worstAfter, c.took())
			if c.err == nil && (r.recovery == 0 || c.end.Sub(back) < r.recovery) {
				r.recovery = c.end.Sub(back)
			}
		default:
			if c.took() > r.worstDuring {
				r.worstDuring, r.worstCall = c.took(), c
			}
		}
	}
	return r
}

func (r outageReport) String() string {
	var parts []string
	for f, n := range r.fates {
		parts = append(parts, fmt.Sprintf("%s %d", fateNames[f], n))
	}
	return fmt.Sprintf("%s; %d local decisions, %d errors wrap ErrUnavailable; worst Enqueue before %v, during %v, after %v; first enqueued %v after Redis was back",
		strings.Join(parts, ", "), r.local, r.unavail,
		r.worstBefore.Round(time.Millisecond), r.worstDuring.Round(time.Millisecond), r.worstAfter.Round(time.Millisecond),
		r.recovery.Round(time.Millisecond))
}

// How long TestEnqueueDuringOutage freezes Redis. Not so long that the
// gate's own connection, with the default 3 s ReadTimeout, gives up on its
// replies.
const (
	// shortPause ends during the retries of the asynq calls that were out
	// when Redis froze: an earlier attempt's write is run when Redis wakes,
	// and the retry waiting then finds the task (conflict).
	shortPause = 1200 * time.Millisecond
	// longPause outlasts asynq's whole call with its retries, so that
	// calls fail outright, their writes run only after they gave up.
	longPause = 2500 * time.Millisecond
)

// asynqReadTimeout is the ReadTimeout of asynq's connection in
// TestEnqueueDuringOutage, the go-redis default (3 s) cut so that a call
// and its retries end within the outage.
const asynqReadTimeout = 500 * time.Millisecond

// enqueueBound is the longest an Enqueue may take while Redis answers
// nothing, with asynq's connection opts:
//
//   - the gate: its deny cache's look at the tenant's log, then the script,
//     each bounded by the gate's timeout;
//   - asynq's call: MaxRetries+1 attempts (go-redis retries a command that
//     timed out), each waiting ReadTimeout for a reply, with go-redis'
//     backoff between them: at most 24, 40 and 72 ms with the defaults;
//   - the Release of the slot after asynq fails for certain (say, with
//     asynq.ErrDuplicateTask), bounded by the gate's timeout; an outage
//     fails asynq ambiguously, and the slot is kept, but the bound allows
//     for it.
func enqueueBound(opts *redis.Options) time.Duration {
	retries := opts.MaxRetries
	if retries == 0 {
		retries = 3
	}
	return 3*admission.DefaultTimeout + time.Duration(retries+1)*opts.ReadTimeout + 136*time.Millisecond
}

// TestEnqueueDuringOutage freezes Redis (SIGSTOP: connections open, no
// replies, data kept) during an Enqueue flood, under each failure policy,
// and then accounts for every task by its ID:
//
//   - every call returns, within enqueueBound;
//   - every task whose Enqueue succeeded is in asynq exactly once;
//   - no task the gate refused (rejected, or ErrUnavailable) is in asynq;
//   - a task whose Enqueue failed in asynq may be there: the ambiguous
//     case, a timeout after the write reached Redis's socket, which Redis
//     runs when it wakes. go-redis retries a command that timed out, so
//     either a retry still waiting then finds the task there and Enqueue
//     returns asynq.ErrTaskIDConflict (conflict: the task is certainly
//     there), or every attempt timed out first and Enqueue returns the
//     timeout (asynq-failed). An asynq-failed task is absent when no attempt
//     got to write: a new connection's HELLO handshake hangs on a frozen
//     Redis, so only attempts on connections opened before the outage
//     write anything. The test counts all of these;
//   - every task in asynq that Redis admitted holds its slot in the
//     tenant's log, ambiguous ones included: Enqueue keeps the slot after
//     a failure that may have written the task, so that the tenant is never
//     admitted past its quota. Slots of asynq-failed tasks that are not
//     there idle until the window passes (reported);
//   - nothing else is in asynq.
func TestEnqueueDuringOutage(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Run("all", func(t *testing.T) {
		for _, policy := range []admission.FailurePolicy{admission.FailClosed, admission.FailOpen} {
			for _, pause := range []time.Duration{shortPause, longPause} {
				t.Run(fmt.Sprintf("%v/frozen-%v", policy, pause), func(t *testing.T) {
					t.Parallel()
					enqueueWhileFrozen(t, policy, pause)
				})
			}
		}
	})
	redistest.VerifyNoLeaks(t, ignore)
}

func enqueueWhileFrozen(t *testing.T, policy admission.FailurePolicy, pause time.Duration) {
	b := serverBackend(t)
	srv := b.server
	opts := srv.Options()
	opts.ReadTimeout = asynqReadTimeout
	asynqRDB := redis.NewClient(opts)
	t.Cleanup(func() { _ = asynqRDB.Close() })
	s := buildStack(t, b, stackConfig{
		quotas:   admission.StaticQuotas{Default: &outageQuota},
		gate:     []admission.Option{admission.WithFailurePolicy(policy)},
		asynqRDB: asynqRDB,
	})
	bound := enqueueBound(opts)
	f := &enqueueFlood{s: s, name: fmt.Sprintf("%v-%v", policy, pause)}
	t.Cleanup(srv.Resume) // should the test fail while Redis is frozen

	f.start()
	f.mark()
	f.waitOK(t, 200, "before the outage")
	srv.Pause()
	down := time.Now()
	time.Sleep(pause) // the outage itself
	srv.Resume()
	back := f.mark()
	f.waitOK(t, 200, "after the outage")
	calls := f.finish(t, bound+outageMargin)
	r := report(calls, down, back)
	t.Logf("%s: %d calls, Redis frozen for %v: %v", f.name, len(calls), pause, r)
	t.Logf("%s: worst call during the outage: %v, %v: %v", f.name, r.worstCall.id, r.worstCall.took().Round(time.Millisecond), r.worstCall.err)

	if worst := max(r.worstBefore, r.worstDuring, r.worstAfter); worst > bound+outageMargin {
		t.Errorf("an Enqueue took %v, want at most %v (the timeouts in its way) + %v", worst, bound, outageMargin)
	}
	for _, err := range r.unexplainedErrs {
		t.Errorf("unexplained error: %v", err)
	}
	switch policy {
	case admission.FailClosed:
		if r.local != 0 {
			t.Errorf("%d local decisions under FailClosed", r.local)
		}
		if r.fates[refused] == 0 || r.unavail == 0 {
			t.Errorf("no call refused with ErrUnavailable during the outage")
		}
	case admission.FailOpen:
		if r.local == 0 {
			t.Errorf("no local decision under FailOpen")
		}
	}
	accountForTasks(t, s, f.name, calls)
}

// accountForTasks checks every call of a flood against what asynq holds,
// and reports how the tenants' logs, the slots, compare with the tasks.
func accountForTasks(t *testing.T, s *stack, name string, calls []call) {
	t.Helper()
	// Every flood call has returned, so whatever any of them wrote is in
	// Redis's socket buffers by now; one more round trip, and Redis has
	// read and run it all.
	if err := s.rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
	held := s.allTasks(t)
	slots := s.slots(t)
	known := make(map[string]bool, len(calls))
	var landed [fates]int
	var lost, refusedButThere, noSlot, releasedButThere []string
	for _, c := range calls {
		known[c.id] = true
		n := held[c.id]
		switch f := fateOf(c); f {
		case enqueued, conflict:
			if n != 1 {
				lost = append(lost, fmt.Sprintf("%s (%s, in asynq %d times): %v", c.id, fateNames[f], n, c.err))
			}
			// Enqueue keeps the slot of a task in asynq.
			if !c.d.Local && !slots[c.id] {
				noSlot = append(noSlot, fmt.Sprintf("%s (%s)", c.id, fateNames[f]))
			}
			landed[f] += n
		case refused:
			if n != 0 {
				refusedButThere = append(refusedButThere, fmt.Sprintf("%s: %v", c.id, c.err))
			}
		case asynqFailed:
			landed[f] += n
			if n > 1 {
				lost = append(lost, fmt.Sprintf("%s (asynq-failed, in asynq %d times)", c.id, n))
			}
			if n == 1 && !c.d.Local && !slots[c.id] {
				releasedButThere = append(releasedButThere, fmt.Sprintf("%s: %v", c.id, c.err))
			}
		}
	}
	var foreign []string
	for id, n := range held {
		if !known[id] {
			foreign = append(foreign, id)
		} else if n > 1 {
			lost = append(lost, fmt.Sprintf("%s (in asynq %d times)", id, n))
		}
	}
	idle := 0 // slots held by no task
	for id := range slots {
		if held[id] == 0 {
			idle++
		}
	}
	ambiguous := landed[conflict] + landed[asynqFailed]
	t.Logf("%s: asynq holds %d tasks: %d enqueued, and %d ambiguous (Enqueue failed, the task is there): %d conflict, %d asynq-failed; %d asynq-failed are not there",
		name, len(held), landed[enqueued], ambiguous, landed[conflict], landed[asynqFailed], countFate(calls, asynqFailed)-landed[asynqFailed])
	t.Logf("%s: the logs hold %d slots; %d of them hold no task (kept after an ambiguous failure, released too late, or never used); %d ambiguous tasks in asynq have no slot (given back by Enqueue)",
		name, len(slots), idle, len(releasedButThere))
	for what, ids := range map[string][]string{
		"enqueued (or conflict), but not once in asynq":                                 lost,
		"refused by the gate, yet in asynq":                                             refusedButThere,
		"enqueued by Redis's decision, but with no slot":                                noSlot,
		"in asynq, but never enqueued by the flood":                                     foreign,
		"ambiguous (asynq-failed) and in asynq, but with no slot: Enqueue gave it back": releasedButThere,
	} {
		if len(ids) > 0 {
			slices.Sort(ids)
			t.Errorf("%d tasks %s, e.g. %q", len(ids), what, ids[:min(len(ids), 5)])
		}
	}
}

// slots returns the entry IDs in the logs of the outage tests' tenants.
func (s *stack) slots(t *testing.T) map[string]bool {
	t.Helper()
	ids := make(map[string]bool)
	for i := range outageTenants {
		members, err := s.rdb.ZRange(context.Background(), fmt.Sprintf("%s:{t%d}:log", s.prefix, i), 0, -1).Result()
		if err != nil {
			t.Fatalf("ZRANGE: %v", err)
		}
		for _, id := range members {
			ids[id] = true
		}
	}
	return ids
}

func countFate(calls []call, f fate) int {
	n := 0
	for _, c := range calls {
		if fateOf(c) == f {
			n++
		}
	}
	return n
}

// allTasks returns how many times each task ID appears in the stack's
// queue, pending or scheduled, and fails t if any task is in another state:
// no worker runs.
func (s *stack) allTasks(t *testing.T) map[string]int {
	t.Helper()
	const pageSize = 1000
	held := make(map[string]int)
	for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
		s.inspector.ListPendingTasks, s.inspector.ListScheduledTasks,
	} {
		for page := 1; ; page++ {
			tis, err := list(s.queue, asynq.PageSize(pageSize), asynq.Page(page))
			if err != nil {
				t.Fatalf("listing %q: %v", s.queue, err)
			}
			for _, ti := range tis {
				held[ti.ID]++
			}
			if len(tis) < pageSize {
				break
			}
		}
	}
	qi, err := s.inspector.GetQueueInfo(s.queue)
	if err != nil {
		t.Fatalf("GetQueueInfo: %v", err)
	}
	if n := qi.Active + qi.Retry + qi.Archived + qi.Completed + qi.Aggregating; n != 0 {
		t.Errorf("queue %q holds %d tasks neither pending nor scheduled: %+v", s.queue, n, qi)
	}
	if sum := qi.Pending + qi.Scheduled; sum != len(held) {
		t.Errorf("queue %q counts %d pending and %d scheduled, but lists %d distinct tasks", s.queue, qi.Pending, qi.Scheduled, len(held))
	}
	return held
}

// killFor is how long TestEnqueueAcrossKill keeps Redis dead.
const killFor = time.Second

// recoverWithin is the promise: once Redis is back, Enqueue succeeds again
// within a second.
const recoverWithin = time.Second

// TestEnqueueAcrossKill kills Redis (connections refused) during an
// Enqueue flood, under each failure policy, and restarts it empty. Nothing
// can be accounted for across an empty restart, so it checks only that
// every call returns within a bound, without a panic, with an error that
// is the gate's (ErrUnavailable, or a rejection) or asynq's, that Enqueue
// succeeds again within recoverWithin of Redis coming back, and that no
// goroutine outlives the test.
func TestEnqueueAcrossKill(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Run("all", func(t *testing.T) {
		for _, policy := range []admission.FailurePolicy{admission.FailClosed, admission.FailOpen} {
			t.Run(policy.String(), func(t *testing.T) {
				t.Parallel()
				enqueueAcrossKill(t, policy)
			})
		}
	})
	redistest.VerifyNoLeaks(t, ignore)
}

func enqueueAcrossKill(t *testing.T, policy admission.FailurePolicy) {
	b := serverBackend(t)
	srv := b.server
	s := buildStack(t, b, stackConfig{
		quotas: admission.StaticQuotas{Default: &outageQuota},
		gate:   []admission.Option{admission.WithFailurePolicy(policy)},
	})
	// asynq's connection has go-redis' defaults. A refused dial fails at
	// once; go-redis dials 5 times (DialerRetries) per attempt, 100 ms
	// apart, and makes MaxRetries+1 (4) attempts, with its backoffs between.
	// Around them, the gate's calls as in enqueueBound.
	bound := 3*admission.DefaultTimeout + 4*(4*100*time.Millisecond) + 136*time.Millisecond
	f := &enqueueFlood{s: s, name: policy.String()}

	f.start()
	f.mark()
	f.waitOK(t, 200, "before the outage")
	srv.Kill()
	down := time.Now()
	time.Sleep(killFor) // the outage itself
	srv.Restart()
	back := f.mark()
	f.waitOK(t, 200, "after the restart")
	calls := f.finish(t, bound+outageMargin)
	r := report(calls, down, back)
	t.Logf("%s: %d calls, Redis dead for %v: %v", f.name, len(calls), killFor, r)
	t.Logf("%s: worst call during the outage: %v, %v: %v", f.name, r.worstCall.id, r.worstCall.took().Round(time.Millisecond), r.worstCall.err)

	if worst := max(r.worstBefore, r.worstDuring, r.worstAfter); worst > bound+outageMargin {
		t.Errorf("an Enqueue took %v, want at most %v + %v", worst, bound, outageMargin)
	}
	for _, err := range r.unexplainedErrs {
		t.Errorf("unexplained error: %v", err)
	}
	if r.recovery > recoverWithin {
		t.Errorf("the first Enqueue begun after the restart to succeed ended %v after it, want within %v", r.recovery, recoverWithin)
	}
}
