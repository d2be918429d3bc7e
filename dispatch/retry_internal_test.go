package dispatch

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch/internal/rule"
	"github.com/admitq/admitq/internal/freshid"
	"github.com/admitq/admitq/internal/redistest"
)

func rig(t testing.TB, q admission.Quota) (*Dispatcher, *redis.Client, *asynq.Client) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	quotas := admission.NewRedisQuotas(rdb)
	if err := quotas.SetDefault(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	g := admission.New(rdb, quotas)
	t.Cleanup(func() { g.Close() })
	d := New(rdb, g, nil)
	return d, rdb, asynq.NewClientFromRedisClient(rdb)
}

// heartbeat + finishes + most grants, as a fake fair worker of concurrency c.
func (d *Dispatcher) turnRaw(ctx context.Context, t *testing.T, most int, args ...any) []pick {
	t.Helper()
	a := append([]any{"fake|1|1", 3_000_000, most}, args...)
	res, err := d.run(ctx, d.scripts.dispatch, "default", a...)
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := readPicks(res)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fairWorker records a fair worker of concurrency c on queue default for
// ten minutes, as a worker's first turn does, and grants nothing.
func (d *Dispatcher) fairWorker(t *testing.T, c int) {
	t.Helper()
	if _, err := d.run(context.Background(), d.scripts.dispatch, "default", "w|"+strconv.Itoa(c)+"|1", 600_000_000, 0, 0, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
}

var q1 = admission.Quota{Limit: 100000, Window: time.Second, MaxInFlight: 1}

// A producer retrying an ID that the dispatcher has granted (state g) is
// told it is in already; if that retry is abandoned (the gate refused it,
// or ctx ended before the write), Abandon gives back nothing the first
// call holds, and the grant still moves the task in.
func TestARetryOfAGrantedIDGivesNothingBack(t *testing.T) {
	ctx := context.Background()
	d, rdb, ac := rig(t, q1)
	d.turnRaw(ctx, t, 0, 0, 0, 0) // register a fair worker
	tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: "a"}, q1)
	if err != nil || tk.Verdict != Straight {
		t.Fatalf("a: %v %v", tk.Verdict, err)
	}
	if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID("a")); err != nil {
		t.Fatal(err)
	}
	tk, err = d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: "b"}, q1)
	if err != nil || tk.Verdict != Wait {
		t.Fatalf("b: %v %v", tk.Verdict, err)
	}
	if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID("b"), asynq.ProcessAt(ParkedUntil)); err != nil {
		t.Fatal(err)
	}
	// a finishes (done): b is granted.
	rdb.Del(ctx, "asynq:{default}:t:a")
	picks := d.turnRaw(ctx, t, 1, 1, "a", 1000, 1, 1, 1000, 0, 0, "", 0, 0, 0)
	if len(picks) != 1 {
		t.Fatalf("picks %v", picks)
	}
	// The producer of b retries (its first call looked ambiguous).
	tk2, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: "b"}, q1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("retry verdict %v", tk2.Verdict)
	// ... and that retry is refused by the gate / ctx ends: abandon.
	if err := d.Abandon(ctx, tk2); err != nil {
		t.Fatal(err)
	}
	// Now the mover moves b in, as the next turn would.
	ops := d.admit(ctx, "default", picks)
	d.move(ctx, "default", ops)
	for range 5 {
		d.turnRaw(ctx, t, 2, 0, 0, 0)
		d.repairAll(ctx, "default")
	}
	z, _ := rdb.ZScore(ctx, "asynq:{default}:scheduled", "b").Result()
	st, _ := rdb.HGet(ctx, "asynq:{default}:t:b", "state").Result()
	run, _ := rdb.HGetAll(ctx, "admitq:fair:{default}:run").Result()
	w, _ := rdb.LRange(ctx, "admitq:fair:{default}:w:t", 0, -1).Result()
	t.Logf("b state=%s score=%v run=%v waiting=%v", st, z, run, w)
	if st == "scheduled" && len(run) == 0 && len(w) == 0 {
		t.Errorf("task b is lost: parked until 9999, in no line and not in run")
	}
}

// A not-before time before 1970 (asynq.ProcessAt long past) is now: the
// entry parses, and no dispatch turn of the queue breaks on it.
func TestANotBeforeBefore1970IsNow(t *testing.T) {
	ctx := context.Background()
	d, _, ac := rig(t, q1)
	d.turnRaw(ctx, t, 0, 0, 0, 0)
	tk, _ := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: "a"}, q1)
	if tk.Verdict != Straight {
		t.Fatal(tk.Verdict)
	}
	ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID("a"))
	tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: "b", NotBefore: time.Unix(-5, 0)}, q1)
	if err != nil || tk.Verdict != Wait {
		t.Fatal(tk.Verdict, err)
	}
	ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID("b"), asynq.ProcessAt(ParkedUntil))
	// a finishes: the next turn tries to grant b.
	a := append([]any{"fake|1|1", 3_000_000, 2}, 1, "a", 1000, 1, 1, 1.0, 0)
	_, err = d.run(ctx, d.scripts.dispatch, "default", a...)
	t.Logf("turn: %v", err)
	_, err = d.run(ctx, d.scripts.dispatch, "default", "fake|1|1", 3_000_000, 2, 0, 0)
	t.Logf("second turn: %v", err)
	for range 3 {
		d.run(ctx, d.scripts.dispatch, "default", "fake|1|1", 3_000_000, 2, 0, 0)
		d.repairAll(ctx, "default")
	}
	rdb := d.rdb
	st, _ := rdb.HGet(ctx, "asynq:{default}:t:b", "state").Result()
	run, _ := rdb.HGetAll(ctx, "admitq:fair:{default}:run").Result()
	w, _ := rdb.LRange(ctx, "admitq:fair:{default}:w:t", 0, -1).Result()
	lim, _ := rdb.ZRange(ctx, "admitq:fair:{default}:limbo", 0, -1).Result()
	t.Logf("b state=%s run=%v w=%v limbo=%q", st, run, w, lim)
	if st == "scheduled" && len(run) == 0 && len(w) == 0 && len(lim) == 0 {
		t.Errorf("b lost: the script LPOPped its entry, then failed (no rollback)")
	}
}

// A producer's task goes straight in only when no tenant waits with an
// earlier start tag: a tenant that has had its share does not pass one the
// dispatcher has yet to serve by arriving while the queue has room.
func TestStraightInKeepsTheFairOrder(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 100000, Window: time.Second}
	d, _, _ := rig(t, q)
	park := func(tenant, id string) Verdict {
		t.Helper()
		tk, err := d.Park(ctx, Task{Queue: "default", Tenant: tenant, ID: id}, q)
		if err != nil {
			t.Fatal(err)
		}
		return tk.Verdict
	}
	d.turnRaw(ctx, t, 0, 0, 0, 0) // a fair worker of concurrency 1: room for 3
	for _, id := range []string{"a1", "a2", "a3"} {
		if v := park("a", id); v != Straight {
			t.Fatalf("%s: %v, want straight in: the queue has room", id, v)
		}
	}
	if v := park("b", "b1"); v != Wait {
		t.Fatalf("b1: %v, want wait: the queue is full", v)
	}
	// A second worker makes room; b waits with an earlier tag than a's.
	a := append([]any{"fake2|8|1", 3_000_000, 0}, 0, 0, 0)
	if _, err := d.run(ctx, d.scripts.dispatch, "default", a...); err != nil {
		t.Fatal(err)
	}
	if v := park("a", "a4"); v != Wait {
		t.Fatalf("a4: %v, want wait: b waits with an earlier start tag", v)
	}
	if v := park("c", "c1"); v != Straight {
		t.Fatalf("c1: %v, want straight in: a new tenant starts at the floor, no later than b", v)
	}
}

// A producer retrying an enqueue with the ID of a task that waits (the
// first write went through) adds no second entry: it is told the task
// waits, and its write finds the task there.
func TestARetryOfAWaitingIDAddsNothing(t *testing.T) {
	ctx := context.Background()
	d, rdb, _ := rig(t, q1)
	d.turnRaw(ctx, t, 0, 0, 0, 0)
	park := func(id string) Ticket {
		tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: id}, q1)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	if tk := park("first"); tk.Verdict != Straight {
		t.Fatalf("first: %v, want straight in", tk.Verdict)
	}
	if tk := park("w"); tk.Verdict != Wait {
		t.Fatalf("w: %v, want wait: the tenant is at its cap", tk.Verdict)
	}
	rdb.HSet(ctx, "asynq:{default}:t:w", "state", "scheduled")
	rdb.ZAdd(ctx, "asynq:{default}:scheduled", redis.Z{Score: float64(ParkedUntil.Unix()), Member: "w"})
	for range 3 {
		tk := park("w")
		if tk.Verdict != Wait || !tk.again {
			t.Fatalf("a retry of w: %v (again %v), want wait, again", tk.Verdict, tk.again)
		}
		if err := d.Abandon(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	if n := rdb.LLen(ctx, "admitq:fair:{default}:w:t").Val(); n != 1 {
		t.Errorf("%d entries wait for one task after three retries, want 1", n)
	}
}

// A task that went straight in and that its producer never wrote gives its
// place back after about a second, not after the repair pass's grace.
func TestAnUnwrittenStraightInFreesItsPlaceInASecond(t *testing.T) {
	ctx := context.Background()
	d, _, _ := rig(t, q1)
	d.turnRaw(ctx, t, 0, 0, 0, 0)
	if tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: "lost"}, q1); err != nil || tk.Verdict != Straight {
		t.Fatalf("lost: %v, %v; want straight in", tk.Verdict, err)
	}
	if tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: "next"}, q1); err != nil || tk.Verdict != Wait {
		t.Fatalf("next: %v, %v; want wait", tk.Verdict, err)
	}
	start := time.Now()
	for time.Since(start) < 3*time.Second {
		d.turnRaw(ctx, t, 0, 0, 0, 0)
		if n, _ := d.rdb.HGet(ctx, "admitq:fair:{default}:t:t", "n").Int(); n == 0 {
			if took := time.Since(start); took > 1500*time.Millisecond {
				t.Errorf("the unwritten task's place came back after %v, want about a second", took)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the unwritten task still holds its tenant's place after 3 s")
}

// Every worker with a gate adds room to a fair queue, fair or not.
func TestEveryGateWorkerAddsRoom(t *testing.T) {
	ctx := context.Background()
	d, _, _ := rig(t, q1)
	for _, m := range []string{"fair|2|1", "capsonly|6|0"} {
		if _, err := d.run(ctx, d.scripts.dispatch, "default", m, 600_000_000, 0, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	if in, want := straightIns(t, d), rule.Room(8, 0); in != want {
		t.Errorf("a fair worker of 2 and a caps-only one of 6: %d tasks went straight in, want %d (both count)", in, want)
	}
}

// evalCounter counts script calls through a client's hooks.
type evalCounter struct{ n atomic.Int64 }

func (c *evalCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *evalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" || n == "fcall" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *evalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A finish that asynq never marks done (its done write failed in an
// outage, so the task stays active until asynq's recoverer takes it) is
// handed in again after a pause that doubles to a second: no busy loop.
func TestAFinishAsynqHasNotMarkedDoneBacksOff(t *testing.T) {
	ctx := context.Background()
	d, rdb, _ := rig(t, q1)
	d.turnRaw(ctx, t, 0, 0, 0, 0)
	if tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: "stuck"}, q1); err != nil || tk.Verdict != Straight {
		t.Fatalf("stuck: %v, %v; want straight in", tk.Verdict, err)
	}
	rdb.HSet(ctx, "asynq:{default}:t:stuck", "state", "active")
	srv, err := d.Serve(Worker{Queues: []string{"default"}, Concurrency: 1, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := &evalCounter{}
	rdb.AddHook(c)
	srv.Finished("default", "t", "stuck", time.Millisecond, true)
	time.Sleep(3 * time.Second)
	t.Logf("%d script calls in 3 s", c.n.Load())
	if n := c.n.Load(); n == 0 || n > 30 {
		t.Errorf("%d script calls in 3 s for one finish asynq has not marked done; want a backoff (about a dozen)", n)
	}
}

// A second waiting entry of a task the dispatcher has let in (a retried
// ID's, or one a snapshot restore put back) is dropped at its turn: the
// task is granted once, and takes one place.
func TestASecondEntryOfAGrantedTaskIsNotGrantedAgain(t *testing.T) {
	ctx := context.Background()
	held := admission.Quota{Limit: 100_000, Window: time.Second, Paused: true}
	d, rdb, ac := rig(t, held)
	d.fairWorker(t, 4)
	line := d.keysFor("default").prefix + "w:t"
	for _, id := range []string{"a", "b"} {
		tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: id}, held)
		if err != nil || tk.Verdict != Wait {
			t.Fatalf("%s: %v %v", id, tk.Verdict, err)
		}
		if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id), asynq.ProcessAt(ParkedUntil)); err != nil {
			t.Fatal(err)
		}
		if id == "a" {
			e, err := rdb.LIndex(ctx, line, 0).Result()
			if err != nil {
				t.Fatal(err)
			}
			rdb.RPush(ctx, line, e) // a's second entry, between a and b
		}
	}
	// t is resumed: its tasks go in, a once.
	picks := d.turnRaw(ctx, t, 4, 0, 0, 1, "t", 0, rule.WeightScale, 0, 0)
	var ids []string
	for _, p := range picks {
		ids = append(ids, p.entry.id)
	}
	if !slices.Equal(ids, []string{"a", "b"}) {
		t.Errorf("granted %v, want [a b]", ids)
	}
	if n, _ := rdb.HLen(ctx, d.keysFor("default").run).Result(); n != 2 {
		t.Errorf("%d tasks in run, want 2", n)
	}
	if n, _ := rdb.LLen(ctx, line).Result(); n != 0 {
		t.Errorf("%d entries still waiting, want none", n)
	}
	if n, _ := rdb.HGet(ctx, d.keysFor("default").prefix+"t:t", "n").Int(); n != 2 {
		t.Errorf("t has %d tasks in flight, want 2", n)
	}
}

// A park of an ID package enqueue made for the call (its ctx marked
// freshid) skips the look for the ID among the parked tasks (HGET of the
// task's state): the call writes its task only after the park answers. It
// still looks among the tasks let in (HEXISTS), so that a park the client
// resends after a lost reply is told the task went in already. It decides
// as a park that looks does, with the same entries.
func TestAFreshIDSkipsTheLookAmongTheParked(t *testing.T) {
	ctx := context.Background()
	// A context marked with other IDs (a custom Quotas' park inside an
	// Enqueue whose ID was made) looks as an unmarked one does.
	marks := []func(id string) context.Context{
		func(string) context.Context { return ctx },
		func(id string) context.Context { return freshid.Mark(ctx, id) },
		func(id string) context.Context { return freshid.Mark(ctx, "another", id+"'") },
	}
	var lines [3][]string
	for i, mark := range marks {
		fresh := i == 1
		d, rdb, _ := rig(t, q1)
		d.turnRaw(ctx, t, 0, 0, 0, 0)
		park := func(id string) Ticket {
			tk, err := d.Park(mark(id), Task{Queue: "default", Tenant: "t", ID: id}, q1)
			if err != nil {
				t.Fatal(err)
			}
			return tk
		}
		hexists, _ := commandStat(t, rdb, "hexists")
		hget, _ := commandStat(t, rdb, "hget")
		var verdicts []Verdict
		for _, id := range []string{"a", "b", "c", "d"} {
			verdicts = append(verdicts, park(id).Verdict)
		}
		if want := []Verdict{Straight, Wait, Wait, Wait}; !slices.Equal(verdicts, want) {
			t.Errorf("fresh %v: verdicts %v, want %v", fresh, verdicts, want)
		}
		hexists2, _ := commandStat(t, rdb, "hexists")
		hget2, _ := commandStat(t, rdb, "hget")
		if n := hexists2 - hexists; n != 4 {
			t.Errorf("fresh %v: four parks made %d HEXISTS calls, want one each", fresh, n)
		}
		switch n := hget2 - hget; {
		case fresh && n != 0:
			t.Errorf("four parks of fresh IDs made %d HGET calls, want none", n)
		case !fresh && n < 4:
			t.Errorf("four parks of a caller's IDs made %d HGET calls, want one each at least", n)
		}
		// The client resends the park of a, which went straight in.
		if tk := park("a"); tk.Verdict != Straight || !tk.again {
			t.Errorf("fresh %v: a's park again: %v (again %v), want straight in, again", fresh, tk.Verdict, tk.again)
		}
		if n, _ := rdb.HGet(ctx, "admitq:fair:{default}:t:t", "n").Int(); n != 1 {
			t.Errorf("fresh %v: the tenant has %d in flight after a's park was resent, want 1", fresh, n)
		}
		lines[i] = rdb.LRange(ctx, "admitq:fair:{default}:w:t", 0, -1).Val()
		for j, e := range lines[i] {
			lines[i][j] = e[strings.LastIndexByte(e, '|'):] // the task ID alone
		}
	}
	for i := range lines[1:] {
		if !slices.Equal(lines[0], lines[i+1]) {
			t.Errorf("the tenant's line: %q with the look, %q under mark %d", lines[0], lines[i+1], i+1)
		}
	}
}
