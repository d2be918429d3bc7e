package dispatch

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch/internal/rule"
)

// A grant for the front goes in at the end of asynq's pending list that
// asynq takes from, or right behind the task its op names while that is
// still pending; grants for the front in one call keep their order, and a
// grant for behind goes behind every task there.
func TestFrontGoesWhereAsynqTakesNext(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	d, rdb, ac := rig(t, q)
	k := d.keysFor("default")
	ids := []string{"a", "b", "c", "e"}
	grantAll(ctx, t, d, ac, q, ids, oneTenant, 16)
	ops := []moveOp{
		{op: opFront, id: "a"},
		{op: opGo, id: "b"},
		{op: opFront, id: "c", after: "f2"}, // f2 is pending: right behind it
		{op: opFront, id: "e", after: "a"},  // a goes in with this call: behind it
	}
	if err := d.move(ctx, "default", ops); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.LRange(ctx, k.pending, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(got) // asynq takes from the right
	if want := []string{"a", "e", "f1", "f2", "c", "f3", "b"}; !slices.Equal(got, want) {
		t.Errorf("asynq takes %v, want %v", got, want)
	}
	for _, id := range ids {
		if r, _ := rdb.HGet(ctx, k.run, id).Result(); r == "" || r[0] != 'p' {
			t.Errorf("%s: run entry %q, want in asynq's hands", id, r)
		}
	}
}

// A grant goes to the front when its tenant is capped, has tasks in flight
// and its tag lags the floor or lagged it at its last grant (rule.Fronts);
// behind the tenant's previous
// task when that is still pending, and not at all while that is still to
// be moved in.
func TestAGrantFrontsWhenItsCapHoldsTheTenantBack(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	capped := q
	capped.MaxInFlight = 3
	for _, c := range []struct {
		name     string
		tag, n   int
		prev     string // the tenant's last grant: "f1" pending, "p" parked
		front    bool
		behind   string
		uncapped bool
		lagged   bool // at its last grant
	}{
		{name: "lags, previous pending", tag: 0, n: 1, prev: "f1", front: true, behind: "f1"},
		{name: "lags, previous running", tag: 0, n: 1, prev: "gone", front: true},
		{name: "lags, previous not moved in", tag: 0, n: 1, prev: "p"},
		{name: "ahead of the floor", tag: 2_000_000, n: 1, prev: "gone"},
		{name: "ahead of the floor, lagged at its last grant", tag: 2_000_000, n: 1, prev: "gone", lagged: true, front: true},
		{name: "lagged at its last grant, no cap", tag: 2_000_000, n: 1, prev: "gone", lagged: true, uncapped: true},
		{name: "nothing in flight", tag: 0, n: 0, prev: "gone"},
		{name: "no cap", tag: 0, n: 1, prev: "gone", uncapped: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, rdb, ac := rig(t, q)
			k := d.keysFor("default")
			d.turnRaw(ctx, t, 0, 0, 0, 0) // room for 3
			for _, id := range []string{"f1", "f2", "f3"} {
				if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id)); err != nil {
					t.Fatal(err)
				}
			}
			quota := capped
			if c.uncapped {
				quota = q
			}
			for _, id := range []string{"p", "c1"} {
				if tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "c", ID: id}, quota); err != nil || tk.Verdict != Wait {
					t.Fatalf("%s: %v %v", id, tk.Verdict, err)
				}
				if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id), asynq.ProcessAt(ParkedUntil)); err != nil {
					t.Fatal(err)
				}
			}
			rdb.LPop(ctx, k.waitingKey("c")) // p stays parked, out of line
			rdb.HSet(ctx, k.meta, "floor", 1_000_000)
			rdb.HSet(ctx, k.tenantKey("c"), "tag", c.tag, "n", c.n, "mv", c.prev, "bh", flag(c.lagged))
			rdb.ZAdd(ctx, k.vt, redis.Z{Score: float64(max(c.tag, 1_000_000)), Member: "c"}) // as refresh places it
			res, err := d.run(ctx, d.scripts.dispatch, "default", "big|16|1", 3_000_000, 8, 0, 0, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			picks, _, err := readPicks(res)
			if err != nil || len(picks) != 1 || picks[0].entry.id != "c1" {
				t.Fatalf("picks %+v, %v", picks, err)
			}
			if p := picks[0]; p.front != c.front || p.after != c.behind {
				t.Errorf("front %v behind %q, want %v %q", p.front, p.after, c.front, c.behind)
			}
			if mv, _ := rdb.HGet(ctx, k.tenantKey("c"), "mv").Result(); mv != "c1" {
				t.Errorf("the tenant's last grant is %q, want c1", mv)
			}
			if bh, _ := rdb.HGet(ctx, k.tenantKey("c"), "bh").Result(); bh != strconv.Itoa(flag(c.tag < 1_000_000)) {
				t.Errorf("bh %q after a grant at tag %d, floor 1000000", bh, c.tag)
			}
		})
	}
}

// Places a cap took back all go to the front, however many finishes a
// turn hands in: a tenant at its cap and held back whose two tasks end in
// one turn has both of its next tasks granted for the front, the second
// behind the first though the first is still to be moved in (the move
// keeps their order), and asynq takes them first, in order: behind the
// tenant's task still pending, when one is.
func TestPlacesACapTookBackGoToTheFront(t *testing.T) {
	for _, c := range []struct {
		name    string
		pending bool // the tenant's task granted before the two is pending still
	}{{"nothing of the tenant's pending", false}, {"one of the tenant's pending", true}} {
		t.Run(c.name, func(t *testing.T) { placesTakenBack(t, c.pending) })
	}
}

func placesTakenBack(t *testing.T, pending bool) {
	ctx := context.Background()
	capped := 2
	if pending {
		capped = 3
	}
	q := admission.Quota{Limit: 100_000, Window: time.Second, MaxInFlight: capped}
	d, rdb, ac := rig(t, q)
	k := d.keysFor("default")
	d.turnRaw(ctx, t, 0, 0, 0, 0)
	ids := []string{"c0", "c1", "p", "c2", "c3"}
	if !pending {
		ids = slices.Delete(ids, 2, 3)
	}
	for i, id := range ids {
		tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "c", ID: id}, q)
		want, at := Wait, ParkedUntil
		if i < capped {
			want, at = Straight, time.Now()
		}
		if err != nil || tk.Verdict != want {
			t.Fatalf("%s: %v %v, want %v", id, tk.Verdict, err, want)
		}
		if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id), asynq.ProcessAt(at)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID("other")); err != nil {
		t.Fatal(err)
	}
	// The tenant lags the floor; c0 and c1 end, and asynq is done with
	// them. p, its last straight in, is its latest task.
	rdb.HSet(ctx, k.meta, "floor", 1_000_000)
	rdb.HSet(ctx, k.tenantKey("c"), "tag", 0)
	rdb.ZAdd(ctx, k.vt, redis.Z{Score: 1_000_000, Member: "c"})
	for _, id := range []string{"c0", "c1"} {
		rdb.LRem(ctx, k.pending, 0, id)
		rdb.Del(ctx, k.taskPrefix+id)
	}
	fin := func(id string) []any { return []any{id, 1000, 1, capped, rule.WeightScale, 0, 0, ""} }
	args := append([]any{2}, append(fin("c0"), fin("c1")...)...)
	res, err := d.run(ctx, d.scripts.dispatch, "default", append([]any{"big|16|1", 3_000_000, 8}, append(args, 0, 0, 0)...)...)
	if err != nil {
		t.Fatal(err)
	}
	picks, _, err := readPicks(res)
	if err != nil || len(picks) != 2 {
		t.Fatalf("picks %+v, %v; want c2 and c3", picks, err)
	}
	var ops []moveOp
	for i, p := range picks {
		if want := []string{"c2", "c3"}[i]; p.entry.id != want || !p.front {
			t.Errorf("grant %d: %s, front %v; want %s at the front", i, p.entry.id, p.front, want)
		}
		ops = append(ops, moveOp{op: opFront, id: p.entry.id, after: p.after})
	}
	if err := d.move(ctx, "default", ops); err != nil {
		t.Fatal(err)
	}
	got := rdb.LRange(ctx, k.pending, 0, -1).Val()
	slices.Reverse(got) // asynq takes from the right
	want := []string{"c2", "c3", "other"}
	if pending {
		want = []string{"p", "c2", "c3", "other"}
	}
	if !slices.Equal(got, want) {
		t.Errorf("asynq takes %v, want %v", got, want)
	}
}

// A move call sends its writes to the scheduled set, the pending list, run
// and the grants once its ops are done: an ID the same call names again
// reads the run entry the call left it, as one write at a time would.
// Moved twice, a task goes in once; moved then freed, it leaves run.
func TestAMoveReadsItsOwnWritesOfAnID(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	d, rdb, ac := rig(t, q)
	k := d.keysFor("default")
	grantAll(ctx, t, d, ac, q, []string{"a", "b"}, oneTenant, 16)
	ops := []moveOp{{op: opGo, id: "a"}, {op: opGo, id: "a"}, {op: opFront, id: "a"}, {op: opGo, id: "b"}, {op: opFree, id: "b"}}
	if err := d.move(ctx, "default", ops); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.LRange(ctx, k.pending, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"b", "a", "f3", "f2", "f1"}; !slices.Equal(got, want) {
		t.Errorf("pending %v, want %v", got, want)
	}
	if r, _ := rdb.HGet(ctx, k.run, "a").Result(); r == "" || r[0] != 'p' {
		t.Errorf("a: run entry %q, want in asynq's hands", r)
	}
	if n, _ := rdb.HExists(ctx, k.run, "b").Result(); n {
		t.Error("b: still in run after its free")
	}
	if n, _ := rdb.HLen(ctx, k.grants).Result(); n != 0 {
		t.Errorf("%d grants left, want none", n)
	}
	if n, _ := rdb.HGet(ctx, k.tenantKey("t"), "n").Int(); n != 1 {
		t.Errorf("tenant's tasks in flight %d, want 1", n)
	}
}

// A turn's writes to run, the scheduled set, the pending list, the grants
// and the queue's order go out once a call, however many tasks it moves
// or hands in: four tenants' four tasks moved make one ZREM, one LPUSH and
// one HDEL of the grants, and their four finishes one HDEL of run, one
// ZREM of the order and one of their IDs' records. Each task's own hash is
// read and written on its own.
func TestATurnWritesEachKeyOnce(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	d, rdb, ac := rig(t, q)
	ids := []string{"a", "b", "c", "e"}
	grantAll(ctx, t, d, ac, q, ids, tenantEach, 16)
	calls := func() map[string]int64 {
		out := map[string]int64{}
		for _, c := range []string{"zrem", "lpush", "hdel", "hget", "hset", "zadd", "zscore", "zmscore"} {
			out[c], _ = commandStat(t, rdb, c)
		}
		return out
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	var ops []moveOp
	for _, id := range ids {
		ops = append(ops, moveOp{op: opGo, id: id})
	}
	if err := d.move(ctx, "default", ops); err != nil {
		t.Fatal(err)
	}
	got := calls()
	// per task: its hash's state; once: run's entries, the tasks' parked
	// scores and the queue's record
	if want := map[string]int64{"zrem": 1, "lpush": 1, "hdel": 1, "hget": 0, "hset": 4 + 2, "zadd": 0, "zscore": 0, "zmscore": 1}; !maps.Equal(got, want) {
		t.Errorf("a move of four tasks made %v, want %v", got, want)
	}
	// asynq ran and deleted them
	for _, id := range ids {
		if err := rdb.Del(ctx, "asynq:{default}:t:"+id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// three of them finish; the fourth keeps the queue from going idle,
	// which would forgive the others' debts in the same turn
	done := ids[:3]
	args := []any{"big|16|1", 3_000_000, 0, len(done)}
	for _, id := range done {
		args = append(args, id, 1000, 1, -1, rule.WeightScale, 0, 0, "")
	}
	if _, err := d.run(ctx, d.scripts.dispatch, "default", append(args, 0, 0, 0)...); err != nil {
		t.Fatal(err)
	}
	got = calls()
	// per task: its hash's state read, its tenant's record written; the
	// IDs are the caller's, so their records in own go too
	if got["hdel"] != 1 || got["zrem"] != 2 || got["hget"] != 3 {
		t.Errorf("a turn handing in three tenants' finishes made %v, want one HDEL (of run), two ZREMs (of the order, and of the IDs' records) and three HGETs (asynq's states)", got)
	}
	if run, _ := rdb.HKeys(ctx, d.keysFor("default").run).Result(); !slices.Equal(run, []string{"e"}) {
		t.Errorf("run holds %v, want [e]", run)
	}
}

// A turn that grants one task of each of many tenants reads the queue's
// order once and writes it once, where a grant at a time would read it
// and place its tenant again: forty tenants with two tasks waiting each
// are granted one each, in the order's order, and each is back in the
// order for its second. (Which tenant goes first, ties and all, is the
// rule's, which TestScriptsFollowTheRule replays.)
func TestAPickOverManyTenantsReadsAndWritesTheOrderOnce(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	d, rdb, ac := rig(t, q)
	k := d.keysFor("default")
	d.turnRaw(ctx, t, 0, 0, 0, 0)
	for _, id := range []string{"f1", "f2", "f3"} { // the room of a worker of concurrency 1
		if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id)); err != nil {
			t.Fatal(err)
		}
	}
	const tenants = 40
	for i := range 2 * tenants {
		id := "task" + strconv.Itoa(i)
		tk, err := d.Park(ctx, Task{Queue: "default", Tenant: tenantEach(i % tenants), ID: id}, q)
		if err != nil || tk.Verdict != Wait {
			t.Fatalf("%s: %v %v", id, tk.Verdict, err)
		}
		if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id), asynq.ProcessAt(ParkedUntil)); err != nil {
			t.Fatal(err)
		}
	}
	order, err := rdb.ZRange(ctx, k.vt, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := d.run(ctx, d.scripts.dispatch, "default", "big|1000|1", 3_000_000, tenants, 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	picks, _, err := readPicks(res)
	if err != nil {
		t.Fatal(err)
	}
	var granted []string
	for _, p := range picks {
		granted = append(granted, p.tenant)
	}
	if !slices.Equal(granted, order) {
		t.Errorf("granted %v, want the order's %v", granted, order)
	}
	zrange, _ := commandStat(t, rdb, "zrange")
	zadd, _ := commandStat(t, rdb, "zadd")
	// besides the order's: the turn reads the workers' records (its worker
	// is new to the queue) and looks at the tasks gone straight in, and
	// writes its worker's heartbeat
	if zrange > 3 || zadd > 2 {
		t.Errorf("a turn granting %d tenants' tasks made %d ZRANGEs and %d ZADDs, want 3 and 2 at most", tenants, zrange, zadd)
	}
	if n, _ := rdb.ZCard(ctx, k.vt).Result(); n != tenants {
		t.Errorf("%d tenants in the order after the turn, want %d", n, tenants)
	}
}

// A batch is sent in parts of at most BATCH_MOST values (fair.lua), for
// Lua's unpack takes about 8,000 at most, so a turn of a fleet of
// thousands moves and hands in thousands of tasks: 4,200 tenants' tasks,
// 8,400 values in a batch of run's entries, are granted, moved and handed
// in by one call each.
func TestATurnOfThousandsSendsItsBatchesInParts(t *testing.T) {
	ctx := context.Background()
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	d, rdb, ac := rig(t, q)
	k := d.keysFor("default")
	const n = 4200
	var ids []string
	for i := range n {
		ids = append(ids, "task"+strconv.Itoa(i))
	}
	grantAll(ctx, t, d, ac, q, ids, tenantEach, 5000)
	var ops []moveOp
	for _, id := range ids {
		ops = append(ops, moveOp{op: opGo, id: id})
	}
	if err := d.move(ctx, "default", ops); err != nil {
		t.Fatal(err)
	}
	if got, _ := rdb.LLen(ctx, k.pending).Result(); got != n+3 {
		t.Fatalf("%d tasks pending, want %d", got, n+3)
	}
	if got, _ := rdb.HLen(ctx, k.grants).Result(); got != 0 {
		t.Fatalf("%d grants left, want none", got)
	}
	for _, id := range ids {
		if err := rdb.Del(ctx, "asynq:{default}:t:"+id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	args := []any{"big|5000|1", 3_000_000, 0, n}
	for _, id := range ids {
		args = append(args, id, 1000, 1, -1, rule.WeightScale, 0, 0, "")
	}
	if _, err := d.run(ctx, d.scripts.dispatch, "default", append(args, 0, 0, 0)...); err != nil {
		t.Fatal(err)
	}
	if got, _ := rdb.HLen(ctx, k.run).Result(); got != 0 {
		t.Errorf("%d tasks left in run, want none", got)
	}
	if got, _ := rdb.ZCard(ctx, k.vt).Result(); got != 0 {
		t.Errorf("%d tenants in the order, want none", got)
	}
}

// grantAll parks ids, of tenant tenant(i), behind three tasks asynq holds
// pending already (a fair worker of concurrency 1 leaves room for three),
// writes them parked as enqueue.Client does, and lets a worker of
// concurrency workers grant them all in one turn.
func grantAll(ctx context.Context, t *testing.T, d *Dispatcher, ac *asynq.Client, q admission.Quota, ids []string, tenant func(i int) string, workers int) {
	t.Helper()
	d.turnRaw(ctx, t, 0, 0, 0, 0)
	for _, id := range []string{"f1", "f2", "f3"} {
		if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id)); err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		tk, err := d.Park(ctx, Task{Queue: "default", Tenant: tenant(i), ID: id}, q)
		if err != nil || tk.Verdict != Wait {
			t.Fatalf("%s: %v %v", id, tk.Verdict, err)
		}
		if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id), asynq.ProcessAt(ParkedUntil)); err != nil {
			t.Fatal(err)
		}
	}
	res, err := d.run(ctx, d.scripts.dispatch, "default", "big|"+strconv.Itoa(workers)+"|1", 3_000_000, len(ids), 0, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if picks, _, err := readPicks(res); err != nil || len(picks) != len(ids) {
		t.Fatalf("granted %d, %v; want %d", len(picks), err, len(ids))
	}
}

// oneTenant names every task's tenant "t".
func oneTenant(int) string { return "t" }

// tenantEach gives task i a tenant of its own.
func tenantEach(i int) string { return "t" + strconv.Itoa(i) }

// A full queue takes only grants owed a place (rule.Pick): a capped tenant
// held back at its cap whose two tasks end in a turn has both of its next
// tasks granted for the front though the queue has no room; one whose tag
// is ahead of the floor is owed nothing and is granted nothing.
func TestAFullQueueTakesOnlyPlacesOwed(t *testing.T) {
	q := admission.Quota{Limit: 100_000, Window: time.Second, MaxInFlight: 2}
	c := fullQueue{tenant: "c", ids: []string{"c0", "c1", "c2", "c3"}, straight: 2}
	c.check(t, q, "held back", 0, []string{"c2", "c3"})
	c.check(t, q, "ahead of the floor", 2_000_000, nil)
}

// So does a place a key's cap took back (rule.KeyFronts): a task carrying
// a key ended while the key was at its cap with tasks waiting on it, and
// the next of those, of a tenant held below its share, is granted for the
// front though the queue has no room; a tenant whose tag is ahead of the
// floor is granted nothing.
func TestAFullQueueTakesPlacesAKeyTookBack(t *testing.T) {
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	c := fullQueue{tenant: "a", ids: []string{"a0", "a1", "a2"}, straight: 1, keys: []Key{{Name: "api", MaxInFlight: 1}}}
	c.check(t, q, "held back", 0, []string{"a1"})
	c.check(t, q, "ahead of the floor", 2_000_000, nil)
}

// fullQueue is a tenant's tasks ids, carrying keys, of which the first
// straight go straight in, in a queue that five more tasks fill.
type fullQueue struct {
	tenant   string
	ids      []string
	straight int
	keys     []Key
}

// check runs, as subtest name, a turn that hands in the finishes of the
// tasks that went straight in, with the tenant's tag at tag and the floor
// at 1,000,000, and wants it to grant want, each for the front.
func (c fullQueue) check(t *testing.T, q admission.Quota, name string, tag int, want []string) {
	t.Run(name, func(t *testing.T) {
		ctx := context.Background()
		d, rdb, ac := rig(t, q)
		k := d.keysFor("default")
		d.turnRaw(ctx, t, 0, 0, 0, 0, 0) // one worker of concurrency 1: room for 3
		for i, id := range c.ids {
			tk, err := d.Park(ctx, Task{Queue: "default", Tenant: c.tenant, ID: id, Keys: c.keys}, q)
			verdict, at := Wait, ParkedUntil
			if i < c.straight {
				verdict, at = Straight, time.Now()
			}
			if err != nil || tk.Verdict != verdict {
				t.Fatalf("%s: %v %v, want %v", id, tk.Verdict, err, verdict)
			}
			if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id), asynq.ProcessAt(at)); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 { // the queue is full
			if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(fmt.Sprintf("o%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		rdb.HSet(ctx, k.meta, "floor", 1_000_000)
		rdb.HSet(ctx, k.tenantKey(c.tenant), "tag", tag)
		rdb.ZAdd(ctx, k.vt, redis.Z{Score: float64(max(tag, 1_000_000)), Member: c.tenant})
		fins := []any{c.straight}
		for _, id := range c.ids[:c.straight] {
			rdb.LRem(ctx, k.pending, 0, id)
			rdb.Del(ctx, k.taskPrefix+id)
			fins = append(fins, id, 1000, 1, q.MaxInFlight, rule.WeightScale, 0, 0, "")
		}
		picks := d.turnRaw(ctx, t, 8, append(fins, 0, 0, 0)...)
		var got []string
		for _, p := range picks {
			got = append(got, p.entry.id)
			if !p.front {
				t.Errorf("%s granted behind the queue, want at the front", p.entry.id)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("a full queue granted %v, want %v", got, want)
		}
	})
}
