package dispatch_test

// The edges an adversary's probe found: a producer's stale quota written
// back into the queue, a stalled Redis under a producer's look, a task
// past its deadline in asynq's retry set, a deleted task's entry in
// limbo, a cap raised while its tenant sat at it, and a rate deferral
// beside a hand-off's admission ahead.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/worker"
)

// producer is a producer of its own, as in another process: its own
// RedisQuotas, rereading a cached quota after refresh.
func producer(t *testing.T, s *stack, refresh time.Duration) *enqueue.Client {
	t.Helper()
	g := admission.New(s.rdb, admission.NewRedisQuotas(s.rdb, admission.WithRefresh(refresh)), admission.WithTimeout(2*time.Second))
	t.Cleanup(func() { g.Close() })
	return enqueue.NewFromRedis(s.rdb, g)
}

// staleProducer is a producer whose cache answers a quota read up to 5 s
// before: any cache can, for a quota it reads again in the background
// (admission.RedisQuotas), though for a second at most past its refresh.
func staleProducer(t *testing.T, s *stack) *enqueue.Client {
	t.Helper()
	return producer(t, s, 5*time.Second)
}

// record reads the dispatcher's record of a tenant ("t:") or key ("k:").
func record(t *testing.T, s *stack, kind, name string) map[string]string {
	t.Helper()
	m, err := s.rdb.HGetAll(context.Background(), "admitq:fair:{default}:"+kind+name).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A producer whose cached quota of key k predates k's resume parks a task
// of k after the resume reached the queue: its park writes "paused" back
// into k's record. The workers, whose own view of k never changed again,
// hand k's limits in again within resendEvery, and the task runs. (Before,
// it waited until a producer with a fresh quota parked another task of k:
// forever, when none came.)
func TestAStaleParkDoesNotPauseAResumedKeyForGood(t *testing.T) {
	s := newStack(t, generous)
	prod := staleProducer(t, s)
	s.setKey("k", admission.Quota{Limit: admission.NoLimit, Paused: true})
	w := newKeyWatch()
	w.startOn(t, s.rdb, s.gate, []string{"default"}, 4, true)
	time.Sleep(1100 * time.Millisecond)                               // the queue is served
	w.put(t, prod, "default", "a", "blocker", "block", []string{"k"}) // prod caches k: paused
	time.Sleep(1200 * time.Millisecond)                               // prod's k is stale now
	s.setKey("k", admission.Quota{Limit: admission.NoLimit})
	eventually(t, 5*time.Second, "the blocker runs once k is resumed", func() bool { return w.ran("blocker") == 1 })
	w.put(t, prod, "default", "b", "late", "1ms", []string{"k"})
	w.waitRuns(t, []string{"late"}, 5*time.Second)
	if rec := record(t, s, "k:", "k"); rec["paused"] == "1" {
		t.Errorf("k's record after late ran: %v, want it resumed", rec)
	}
	w.unblock("blocker")
}

// The same for a tenant: p, resumed while a full fair queue keeps its
// tasks waiting (so no finish of p hands its quota in), gets its paused
// quota written back by a producer's stale park. Its tasks still run once
// the queue has room.
func TestAStaleParkDoesNotPauseAResumedTenantForGood(t *testing.T) {
	s := newStack(t, generous)
	prod := staleProducer(t, s)
	paused := generous
	paused.Paused = true
	s.setQuota("p", paused)
	w := newKeyWatch()
	w.startOn(t, s.rdb, s.gate, []string{"default"}, 1, true)
	time.Sleep(1100 * time.Millisecond)
	blockers := fillRoom(t, s, w)
	ps := []string{"p1", "p2", "p3"}
	for _, id := range ps {
		w.put(t, prod, "default", "p", id, "1ms", nil)
	}
	time.Sleep(1200 * time.Millisecond) // prod's quota of p is stale now
	s.setQuota("p", generous)
	eventually(t, 5*time.Second, "p's record is resumed", func() bool { return record(t, s, "t:", "p")["paused"] == "0" })
	time.Sleep(600 * time.Millisecond) // the loops have handed the resume in
	w.put(t, prod, "default", "p", "p4", "1ms", nil)
	ps = append(ps, "p4")
	for _, id := range blockers {
		w.unblock(id)
	}
	w.waitRuns(t, ps, 8*time.Second)
}

// A producer idle for longer than its quota cache's refresh and a second
// reads a key's quota again before it parks a task: it cannot write back
// the cap of before a change, and the cap, lowered while tasks of the key
// run, holds once they end. (Before, its cached cap of 3 went back into
// the key's record, and three of the key's tasks ran at once under a cap
// of 1 until another producer's park.)
func TestAnIdleProducerDoesNotRaiseALoweredCap(t *testing.T) {
	s := newStack(t, generous)
	prod := producer(t, s, admission.DefaultRefresh)
	s.setKey("k", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 3})
	w := newKeyWatch()
	w.startOn(t, s.rdb, s.gate, []string{"default"}, 8, true)
	time.Sleep(1100 * time.Millisecond)
	for _, id := range []string{"b1", "b2", "b3"} {
		w.put(t, prod, "default", "a", id, "block", []string{"k"}) // prod caches k: cap 3
	}
	eventually(t, 5*time.Second, "3 blockers run", func() bool { return w.ran("b1")+w.ran("b2")+w.ran("b3") == 3 })
	for _, id := range []string{"x1", "x2", "x3"} {
		w.put(t, s.client, "default", "c", id, "block", []string{"k"})
	}
	time.Sleep(admission.DefaultRefresh + 1100*time.Millisecond) // prod's entry of k is old now
	s.setKey("k", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
	eventually(t, 5*time.Second, "k's cap is 1 in the queue", func() bool { return record(t, s, "k:", "k")["cap"] == "1" })
	w.put(t, prod, "default", "d", "x4", "block", []string{"k"})
	if rec := record(t, s, "k:", "k"); rec["cap"] != "1" {
		t.Errorf("k's record after the idle producer's park: %v, want cap 1", rec)
	}
	for _, id := range []string{"b1", "b2", "b3"} {
		w.unblock(id)
	}
	time.Sleep(time.Second)
	if n := w.ran("x1") + w.ran("x2") + w.ran("x3") + w.ran("x4"); n > 1 {
		t.Errorf("%d of k's tasks run at once under its cap of 1", n)
	}
	for _, id := range []string{"x1", "x2", "x3", "x4"} {
		w.unblock(id)
	}
	w.waitRuns(t, []string{"x1", "x2", "x3", "x4"}, 20*time.Second)
}

// A producer's look at whether its queue is dispatched (Mode, which
// Enqueue makes before a park) fails within the gate's WithTimeout on a
// stalled Redis, through a client that ignores context deadlines
// (ContextTimeoutEnabled unset, as redis.NewClient leaves it), and a look
// right after answers the failure without a second wait. Before, Enqueue
// waited out go-redis's read timeouts and retries: 80 s.
func TestAStalledRedisFailsModeInTheGatesTimeout(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	g := admission.New(rdb, admission.NewRedisQuotas(rdb), admission.WithTimeout(200*time.Millisecond))
	t.Cleanup(func() { g.Close() })
	d := dispatch.New(rdb, g, nil)
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil { // a connection up before the stall
		t.Fatal(err)
	}
	srv.Pause()
	t.Cleanup(srv.Resume)
	start := time.Now()
	_, _, err := d.Mode(ctx, "default")
	if took := time.Since(start); err == nil || took > time.Second {
		t.Errorf("Mode on a stalled Redis: %v after %v, want an error within the gate's 200 ms", err, took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Mode's error %v, want it to wrap context.DeadlineExceeded", err)
	}
	// Enqueue looks twice: the second look answers the failure at once.
	start = time.Now()
	if _, _, err := d.Mode(ctx, "default"); err == nil || time.Since(start) > 50*time.Millisecond {
		t.Errorf("Mode again at once: %v after %v, want the failure without a wait", err, time.Since(start))
	}
	// Once Redis answers again, so does Mode, within the gate's timeout.
	srv.Resume()
	eventually(t, 2*time.Second, "Mode answers once Redis does", func() bool {
		_, _, err := d.Mode(ctx, "default")
		return err == nil
	})
}

// A capped tenant's task whose asynq.Deadline passes after its grant,
// while it waits in asynq's pending list behind another tenant's tasks,
// is failed by asynq without running and put in its retry set, where its
// backoff (an hour here, up to weeks by asynq's default) would hold the
// tenant's only place. The repair pass archives it, as asynq would after
// its last retry, and the tenant's next task runs. (Before, the next task
// waited out the whole retry schedule.)
func TestAnOverdueRetryFreesItsPlace(t *testing.T) {
	s, w := overdueStack(t)
	for i := 0; ; i++ {
		if w.put(t, s.client, "default", "o", fmt.Sprintf("o%d", i), "700ms", nil).Outcome == admission.Parked {
			break
		} else if i > 10 {
			t.Fatal("o's tasks never waited: the fair queue of one worker has no bound")
		}
	}
	if d := w.put(t, s.client, "default", "fa", "y", "1ms", nil, asynq.Deadline(time.Now().Add(time.Second))); d.Outcome != admission.Parked {
		t.Fatalf("y: %v, want it parked", d.Outcome)
	}
	w.put(t, s.client, "default", "fa", "next", "1ms", nil)
	w.waitRuns(t, []string{"next"}, 15*time.Second)
	if n := w.ran("y"); n != 0 {
		t.Errorf("y ran %d times past its deadline", n)
	}
	info, err := s.ins.GetTaskInfo("default", "y")
	if err != nil || info.State != asynq.TaskStateArchived {
		t.Errorf("y: %+v, %v; want it archived", info, err)
	}
	if n, _ := s.rdb.HLen(context.Background(), "admitq:fair:{default}:deadlines").Result(); n != 0 {
		t.Errorf("the dispatcher keeps %d deadlines with nothing waiting", n)
	}
}

// A tenant's parked task deleted from outside (asynqmon's "delete") leaves
// its entry in limbo at its turn, where it is looked for again for up to
// an hour. Its tenant, whose long tasks ran at a short estimate, ends
// with its tag ahead of the floor. Once the queue is idle its debt is
// forgiven, limbo or not: its record keeps its limits, for the entry, and
// nothing else, as the rule forgets an idle tenant. (Before, the debt and
// the long estimate held for the hour: the tenant, back beside a new one,
// got 7-16 of the first 30 starts, against 15-17 without the deleted
// task.)
func TestADeletedEntryKeepsNoDebt(t *testing.T) {
	s := newStack(t, generous)
	w := newKeyWatch()
	w.startOn(t, s.rdb, s.gate, []string{"default"}, 1, true)
	time.Sleep(1100 * time.Millisecond) // the queue is served
	var blockers []string
	victim := ""
	for i := 0; victim == ""; i++ {
		id := fmt.Sprintf("a-%d", i)
		if w.put(t, s.client, "default", "a", id, "block", nil).Outcome == admission.Parked {
			victim = id
		} else if blockers = append(blockers, id); i > 10 {
			t.Fatal("a's tasks never waited: the fair queue of one worker has no bound")
		}
	}
	if err := s.ins.DeleteTask("default", victim); err != nil {
		t.Fatal(err)
	}
	for _, id := range blockers {
		time.Sleep(300 * time.Millisecond) // each runs long, at the estimate of a short task
		w.unblock(id)
	}
	w.waitRuns(t, blockers, 5*time.Second)
	ctx := context.Background()
	eventually(t, 5*time.Second, "the victim's entry is in limbo", func() bool {
		return s.rdb.ZCard(ctx, "admitq:fair:{default}:limbo").Val() == 1
	})
	eventually(t, 5*time.Second, "a is forgotten but its limits once the queue is idle", func() bool {
		rec := record(t, s, "t:", "a")
		for f := range rec {
			if f != "cap" && f != "wm" && f != "paused" && f != "l" {
				return false
			}
		}
		return rec["l"] == "1" && rec["wm"] != ""
	})
}

// A zero Ticket, and Park's with an error, decide nothing: their Verdict
// is NoVerdict, never Direct ("enqueue it as without the dispatcher"),
// which would let a caller that skips the error past caps and pauses.
func TestAZeroTicketDecidesNothing(t *testing.T) {
	if v := (dispatch.Ticket{}).Verdict; v != dispatch.NoVerdict || v.String() != "none" {
		t.Errorf("a zero Ticket's Verdict is %v (%d), want NoVerdict", v, v)
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	g := admission.New(rdb, admission.NewRedisQuotas(rdb))
	t.Cleanup(func() { g.Close() })
	tk, err := dispatch.New(rdb, g, nil).Park(context.Background(), dispatch.Task{Queue: "default", Tenant: "", ID: "x"}, generous)
	if err == nil || tk.Verdict != dispatch.NoVerdict {
		t.Errorf("Park of a task without a tenant: %v, %v; want an error and NoVerdict", tk.Verdict, err)
	}
	for v, want := range map[dispatch.Verdict]string{dispatch.Direct: "direct", dispatch.Straight: "straight", dispatch.Wait: "wait", dispatch.Full: "full", 9: "Verdict(9)"} {
		if v.String() != want {
			t.Errorf("Verdict %d prints %q, want %q", int(v), v.String(), want)
		}
	}
}

// TestARaisedCapReachesATenantAtIt: a tenant capped at 1 whose one task
// runs on (no finish, no new task) and five wait: its cap raised to 4
// starts three more within about a second, in a fair queue and in one
// that is not, though a tenant at its cap is in none of the queue's
// sets the workers read; the worker running its task looks it up.
func TestARaisedCapReachesATenantAtIt(t *testing.T) {
	for _, fair := range []bool{true, false} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			s := newStack(t, generous)
			s.setQuota("a", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
			w := newKeyWatch()
			w.startOn(t, s.rdb, s.gate, []string{"default"}, 8, fair)
			var ids []string
			for i := range 6 {
				ids = append(ids, fmt.Sprintf("b%d", i))
				w.put(t, s.client, "default", "a", ids[i], "block", nil)
			}
			started := func() (n int) {
				for _, id := range ids {
					n += w.ran(id)
				}
				return n
			}
			eventually(t, 3*time.Second, "b0 runs", func() bool { return w.ran("b0") == 1 })
			time.Sleep(500 * time.Millisecond)
			if n := started(); n != 1 {
				t.Fatalf("%d started under a cap of 1", n)
			}
			if err := s.quotas.Set(context.Background(), "a", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 4}); err != nil {
				t.Fatal(err)
			}
			eventually(t, 2*time.Second, "four running after the cap went from 1 to 4", func() bool { return started() == 4 })
			time.Sleep(300 * time.Millisecond)
			if n := started(); n != 4 {
				t.Errorf("%d started under a cap of 4", n)
			}
			for _, id := range ids {
				w.unblock(id)
			}
			w.waitRuns(t, ids, 10*time.Second)
		})
	}
}

// TestFIFOHoldsWhenTheRateDefersACappedTenant: a tenant capped at 2 and
// limited to 3 starts a second sends nine tasks of one flow (and three of
// a higher priority) beside an unlimited tenant, to one worker, so that
// asynq takes them in the order they go in. The rate defers some of its
// grants, which go back to the head of its line: no task of the flow
// admitted ahead at a hand-off goes in before them. (Before, about one
// run in six took a task before the one ahead of it.)
func TestFIFOHoldsWhenTheRateDefersACappedTenant(t *testing.T) {
	for round := range 3 {
		for _, fair := range []bool{true, false} {
			t.Run(fmt.Sprintf("fair=%v/%d", fair, round), func(t *testing.T) {
				t.Parallel()
				s := newStack(t, admission.Quota{Limit: admission.NoLimit})
				s.setQuota("r", admission.Quota{Limit: 3, Window: time.Second, MaxDelay: time.Minute, MaxInFlight: 2})
				w := newKeyWatch()
				w.startOn(t, s.rdb, s.gate, []string{"default"}, 1, fair)
				var lo, hi []string
				for i := range 9 {
					lo = append(lo, fmt.Sprintf("lo%d", i))
					w.put(t, s.client, "default", "r", lo[i], "5ms", nil)
					if i%3 == 2 {
						hi = append(hi, fmt.Sprintf("hi%d", i))
						w.put(t, s.client, "default", "r", hi[len(hi)-1], "5ms", nil, enqueue.Priority(5))
					}
					w.put(t, s.client, "default", "o", fmt.Sprintf("o%d", i), "20ms", nil)
				}
				w.waitRuns(t, append(lo, hi...), 20*time.Second)
				for _, flow := range [][]string{lo, hi} {
					if got := w.takenOf(t, flow); !slices.Equal(got, flow) {
						t.Errorf("taken in the order %v, want %v", got, flow)
					}
				}
			})
		}
	}
}

// The same for a task that went straight in (its tenant under its cap, the
// queue with room) and whose deadline passed in asynq's pending list: its
// deadline was recorded only for a task that waited, and the tenant stood
// still through the retries' backoff.
func TestAnOverdueRetryThatWentStraightInFreesItsPlace(t *testing.T) {
	s, w := overdueStack(t)
	w.put(t, s.client, "default", "o", "o1", "1500ms", nil)
	eventually(t, 5*time.Second, "o1 holds the worker", func() bool { return w.ran("o1") == 1 })
	if d := w.put(t, s.client, "default", "fa", "y", "1ms", nil, asynq.Deadline(time.Now().Add(500*time.Millisecond))); d.Outcome != admission.Admitted {
		t.Fatalf("y: %v, want it straight in", d.Outcome)
	}
	if d := w.put(t, s.client, "default", "fa", "next", "1ms", nil); d.Outcome != admission.Parked {
		t.Fatalf("next: %v, want it parked behind y", d.Outcome)
	}
	w.waitRuns(t, []string{"next"}, 10*time.Second)
	if n := w.ran("y"); n != 0 {
		t.Errorf("y ran %d times past its deadline", n)
	}
	if info, err := s.ins.GetTaskInfo("default", "y"); err != nil || info.State != asynq.TaskStateArchived {
		t.Errorf("y: %+v, %v; want it archived", info, err)
	}
}

// overdueStack serves a fair queue with one worker whose retries wait an
// hour, and caps tenant fa at 1, for the tests of overdue retries.
func overdueStack(t *testing.T) (*stack, *keyWatch) {
	t.Helper()
	s := newStack(t, generous)
	s.setQuota("fa", admission.Quota{Limit: 100_000, Window: time.Second, MaxInFlight: 1})
	w := newKeyWatch()
	wk := worker.NewFromRedis(s.rdb, worker.Config{
		Queues: map[string]int{"default": 1}, Concurrency: 1, Gate: s.gate, Fair: true,
		RetryDelayFunc:  func(int, error, *asynq.Task) time.Duration { return time.Hour },
		ShutdownTimeout: 2 * time.Second,
	})
	if err := wk.Start(w); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wk.Shutdown)
	time.Sleep(1100 * time.Millisecond) // the queue is served
	return s, w
}
