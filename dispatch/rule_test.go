package dispatch

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch/internal/rule"
	"github.com/admitq/admitq/lua"
)

// TestScriptsFollowTheRule replays seeded random workloads against the
// dispatcher's scripts on a real redis-server and against the Go model of
// its rule (package rule), and fails on the first difference: a producer's
// verdict, a turn's grants and their order, or any state the rule keeps
// (the floor, each tenant's tag, tasks in flight, cap, weight, pause and
// estimate, the runnable tenants and their start tags, each flow's line,
// each key's places, cap, pause, hold, waiting count and the tenants
// registered with it). Tasks carry random priorities and keys, whose caps,
// pauses and holds change as they go.
func TestScriptsFollowTheRule(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { replay(t, seed, 800) })
	}
}

// replayer drives the scripts and the model side by side.
type replayer struct {
	t     *testing.T
	ctx   context.Context
	d     *Dispatcher
	k     queueKeys
	model *rule.Queue
	rng   *rand.Rand
	quota map[string]admission.Quota
	// keyQuota are the keys' quotas now; keyAsleep the keys a throttled
	// task held, until the next turn; parkedAt each granted task's park µs.
	keyQuota  map[string]rule.KeyLimits
	keyAsleep []string
	parkedAt  map[string]int64
	// seen counts the steps that had a tenant registered with a key, a
	// key at its cap, a key held, and a key owed a place its cap took
	// back: the replay must reach them.
	seen [4]int
	// fronts counts the grants that went to the queue's front; streaks
	// the grants that followed one of the same tenant in a turn.
	fronts, streaks int
	loans           int // steps with a runnable tenant placed ahead of its tag (rule.Lent)
	owed            int // steps with a tenant owed places its cap took back
	// moved are tasks in flight in asynq's hands, by ID; retried those
	// asynq will run again.
	moved   []string
	retried map[string]bool
	asleep  []string // tenants put to sleep by the last turn
	seq     int
	// pendingOps are the last turn's grants' moves, for the next turn.
	pendingOps []moveOp
}

func replay(t *testing.T, seed uint64, steps int) {
	d, rdb, _ := rig(t, admission.Quota{Limit: 100_000, Window: time.Second})
	r := &replayer{t: t, ctx: context.Background(), d: d, k: d.keysFor("default"), model: rule.New(),
		rng: rand.New(rand.NewPCG(seed, 7)), quota: map[string]admission.Quota{}, retried: map[string]bool{},
		keyQuota: map[string]rule.KeyLimits{}, parkedAt: map[string]int64{}}
	// A fair worker with room for everything: the rule, not the room, is
	// under test here.
	if _, err := d.run(r.ctx, d.scripts.dispatch, "default", "replay|100000|1", 600_000_000, 0, 0, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	tenants := []string{"a", "b", "c", "d", "e|x"}
	for step := range steps {
		T := tenants[r.rng.IntN(len(tenants))]
		if r.rng.IntN(3) == 0 || r.quota[T] == (admission.Quota{}) {
			r.quota[T] = admission.Quota{Limit: 100_000, Window: time.Second, MaxInFlight: r.rng.IntN(4),
				Weight: []float64{0, 1, 2, 3, 0.5}[r.rng.IntN(5)], MaxParked: 1 << 20, Paused: r.rng.IntN(6) == 0}
		}
		for _, K := range replayKeys {
			if r.rng.IntN(8) == 0 {
				r.keyQuota[K] = rule.KeyLimits{Cap: r.rng.IntN(4), Paused: r.rng.IntN(8) == 0}
			}
		}
		switch n := r.rng.IntN(10); {
		case n < 5:
			r.park(T)
		default:
			r.turn()
		}
		r.compare(step)
		if t.Failed() {
			return
		}
	}
	if slices.Contains(r.seen[:], 0) {
		t.Errorf("the replay never had a tenant registered with a key, a key at its cap, a key held, or a key owed a place: %v", r.seen)
	}
	if r.fronts == 0 || r.streaks == 0 || r.loans == 0 || r.owed == 0 {
		t.Errorf("the replay granted %d tasks for the queue's front and %d after one of the same tenant, placed a tenant on a loan at %d steps and owed one places at %d; want some of each", r.fronts, r.streaks, r.loans, r.owed)
	}
	_ = rdb
}

// replayKeys are the concurrency keys replayed tasks carry.
var replayKeys = []string{"k1", "k2", "k:3|x"}

// park parks a new task of T on both sides, with a random priority and
// keys, and writes it as its producer would: pending when it went straight
// in, parked when it waits.
func (r *replayer) park(T string) {
	r.seq++
	id := fmt.Sprintf("%s-%d", T, r.seq)
	q := r.quota[T]
	task := Task{Queue: "default", Tenant: T, ID: id, Priority: []int{0, 0, 0, 1, -1, 5}[r.rng.IntN(6)]}
	lims := map[string]rule.KeyLimits{}
	var names []string
	for _, K := range replayKeys {
		if r.rng.IntN(4) == 0 {
			lim := r.keyQuota[K]
			task.Keys = append(task.Keys, Key{Name: K, MaxInFlight: lim.Cap, Paused: lim.Paused})
			lims[K] = lim
			names = append(names, K)
		}
	}
	slices.Reverse(task.Keys) // Park sorts them
	tk, err := r.d.Park(r.ctx, task, q)
	if err != nil {
		r.t.Fatal(err)
	}
	slices.Sort(names)
	_, in := r.model.Park(rule.Task{Tenant: T, ID: id, Flow: rule.FlowID(task.Priority, names), At: tk.Now.UnixMicro()}, limitsOf(q), lims, 1<<30)
	if want := map[bool]Verdict{true: Straight, false: Wait}[in]; tk.Verdict != want {
		r.t.Fatalf("park %s: the script says %v, the model %v", id, tk.Verdict, want)
	}
	tp := r.k.taskPrefix + id
	if in {
		r.d.rdb.HSet(r.ctx, tp, "state", "pending", "msg", "")
		r.d.rdb.LPush(r.ctx, r.k.pending, id)
		r.moved = append(r.moved, id)
		return
	}
	r.d.rdb.HSet(r.ctx, tp, "state", "scheduled", "msg", "")
	r.d.rdb.ZAdd(r.ctx, r.k.scheduled, redis.Z{Score: float64(ParkedUntil.Unix()), Member: id})
}

// turn hands in some finishes, moves or puts back the last grants, and
// grants some more, on both sides.
func (r *replayer) turn() {
	args := []any{"replay|100000|1", 600_000_000}
	most := r.rng.IntN(4)
	if r.rng.IntN(8) == 0 {
		most = 16 // long turns: a tenant granted again while it stays the lowest
	}
	args = append(args, most)
	var fins []any
	var held, heldKeys []string // tenants and keys a throttled task holds, until the next turn
	n := 0
	for i := 0; i < len(r.moved) && n < 3; i++ {
		if r.rng.IntN(3) != 0 {
			continue
		}
		id := r.moved[i]
		T := r.model.InFlight[id].Tenant
		q := r.quota[T]
		ran := int64(r.rng.IntN(30_000))
		done := r.retried[id] || r.rng.IntN(5) != 0
		state := "completed"
		if !done {
			state = "retry"
			r.retried[id] = true
		}
		r.d.rdb.HSet(r.ctx, r.k.taskPrefix+id, "state", state)
		lim := limitsOf(q)
		hold := !done && r.rng.IntN(2) == 0 // a throttled task holds its tenant, or a key
		holdKey := ""
		if _, keys := rule.ParseFlow(r.model.InFlight[id].Flow); hold && len(keys) > 0 && r.rng.IntN(2) == 0 {
			holdKey = keys[r.rng.IntN(len(keys))]
		}
		fins = append(fins, id, ran, flag(done), lim.Cap, lim.Weight, flag(lim.Paused), flag(hold), holdKey)
		r.model.Finish(id, ran, done, lim, hold, holdKey)
		switch {
		case holdKey != "":
			heldKeys = append(heldKeys, holdKey)
		case hold:
			held = append(held, T)
		}
		if done {
			r.moved = append(r.moved[:i], r.moved[i+1:]...)
			i--
		}
		n++
	}
	args = append(append(args, n), fins...)
	args = appendOps(args, r.pendingOps)
	// The limits of a tenant or two as their quotas say now: a pause or a
	// resume without a task of theirs.
	var updates []any
	for _, T := range []string{"a", "c", "e|x"} {
		if q, ok := r.quota[T]; ok && r.rng.IntN(3) == 0 {
			lim := limitsOf(q)
			updates = append(updates, T, lim.Cap, lim.Weight, flag(lim.Paused))
		}
	}
	args = append(append(args, len(updates)/4), updates...)
	var keyUpdates []any
	for _, K := range replayKeys {
		if lim, ok := r.keyQuota[K]; ok && r.rng.IntN(3) == 0 {
			keyUpdates = append(keyUpdates, K, lim.Cap, flag(lim.Paused))
		}
	}
	args = append(append(args, len(keyUpdates)/3), keyUpdates...)
	wake, wakeKeys := r.asleep, r.keyAsleep // asleep since the last turn: this one wakes them
	r.asleep, r.keyAsleep = held, heldKeys
	r.applyOps()
	for i := 0; i < len(updates); i += 4 {
		T := updates[i].(string)
		r.model.Update(T, limitsOf(r.quota[T]))
	}
	for i := 0; i < len(keyUpdates); i += 3 {
		K := keyUpdates[i].(string)
		r.model.UpdateKey(K, r.keyQuota[K])
	}
	res, err := r.d.run(r.ctx, r.d.scripts.dispatch, "default", args...)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, T := range wake {
		if !slices.Contains(r.asleep, T) {
			r.model.Wake(T)
		}
	}
	slices.Sort(wakeKeys)
	for _, K := range slices.Compact(wakeKeys) {
		if !slices.Contains(r.keyAsleep, K) {
			r.model.WakeKey(K)
		}
	}
	picks, _, err := readPicks(res)
	if err != nil {
		r.t.Fatal(err)
	}
	want := r.model.Pick(most, 1<<30, nil)
	r.model.Forgive()
	if len(picks) != len(want) {
		r.t.Fatalf("a turn granted %d tasks, the model %d (%v)", len(picks), len(want), want)
	}
	r.pendingOps = nil
	for i, p := range picks {
		if p.tenant != want[i].Tenant || p.entry.id != want[i].ID {
			r.t.Fatalf("grant %d: the script granted %s of %s, the model %s of %s", i, p.entry.id, p.tenant, want[i].ID, want[i].Tenant)
		}
		if p.front && !want[i].Front {
			r.t.Fatalf("grant %d: the script puts %s at the queue's front, the model does not", i, p.entry.id)
		}
		if p.front {
			r.fronts++
		}
		if i > 0 && picks[i-1].tenant == p.tenant {
			r.streaks++
		}
		r.parkedAt[p.entry.id] = p.entry.parked
		op := moveOp{op: opGo, id: p.entry.id}
		switch r.rng.IntN(6) {
		case 0:
			op = moveOp{op: opBack, id: p.entry.id}
		case 1:
			op = moveOp{op: opBack, id: p.entry.id, sleep: time.Microsecond}
		}
		r.pendingOps = append(r.pendingOps, op)
	}
}

// applyOps applies the moves the next turn hands in to the model, as
// fair.lua's applyOps does: the tasks that go back last, the last first,
// so that a tenant's grants that all go back keep their order.
func (r *replayer) applyOps() {
	for _, o := range r.pendingOps {
		if o.op == opGo {
			r.moved = append(r.moved, o.id)
		}
	}
	for _, o := range slices.Backward(r.pendingOps) {
		if o.op != opBack {
			continue
		}
		T := r.model.InFlight[o.id].Tenant
		r.model.Back(o.id, r.parkedAt[o.id], o.sleep > 0)
		if o.sleep > 0 {
			r.asleep = append(r.asleep, T)
		}
	}
}

// compare fails on any difference between the state the scripts keep and
// the model's.
func (r *replayer) compare(step int) {
	t, ctx, rdb, k := r.t, r.ctx, r.d.rdb, r.k
	t.Helper()
	meta := rdb.HGetAll(ctx, k.meta).Val()
	if got := atoi(meta["floor"]); got != r.model.Floor {
		t.Fatalf("step %d: floor %d, the model's %d", step, got, r.model.Floor)
	}
	if got := atoi(meta["est"]); got != r.model.Estimate {
		t.Fatalf("step %d: queue estimate %d, the model's %d", step, got, r.model.Estimate)
	}
	vt := rdb.ZRangeWithScores(ctx, k.vt, 0, -1).Val()
	if len(vt) != len(r.model.Runnable) {
		t.Fatalf("step %d: %d runnable tenants, the model has %d (%v, %v)", step, len(vt), len(r.model.Runnable), vt, r.model.Runnable)
	}
	for _, z := range vt {
		want, ok := r.model.Runnable[z.Member.(string)]
		if !ok || int64(z.Score) != want {
			t.Fatalf("step %d: tenant %s runnable at %v, the model at %d (%v)", step, z.Member, z.Score, want, ok)
		}
		if m := r.model.Tenants[z.Member.(string)]; want < m.Tag && want == r.model.Floor {
			r.loans++
		}
	}
	run := rdb.HGetAll(ctx, k.run).Val()
	if len(run) != len(r.model.InFlight) {
		t.Fatalf("step %d: %d tasks in flight, the model has %d", step, len(run), len(r.model.InFlight))
	}
	for id, e := range run {
		f, _ := parseRunEntry(e)
		m, ok := r.model.InFlight[id]
		if !ok || f.tenant != m.Tenant || f.flow != m.Flow || f.estimate != m.Estimate {
			t.Fatalf("step %d: in flight %s = %q, the model's %+v (%v)", step, id, e, m, ok)
		}
	}
	r.compareLines(step)
	r.compareKeys(step)
	hashes := rdb.Keys(ctx, k.prefix+"t:*").Val()
	if len(hashes) != len(r.model.Tenants) {
		t.Fatalf("step %d: %d tenant records, the model has %d (%v)", step, len(hashes), len(r.model.Tenants), hashes)
	}
	for T, m := range r.model.Tenants {
		h := rdb.HGetAll(ctx, k.tenantKey(T)).Val()
		got := [9]int64{atoi(h["tag"]), atoi(h["n"]), atoi(h["cap"]), atoi(h["wm"]), atoi(h["est"]), atoi(h["paused"]), atoi(h["bh"]), atoi(h["lg"]), atoi(h["ow"])}
		want := [9]int64{m.Tag, int64(m.N), int64(m.Cap), m.Weight, m.Estimate, int64(flag(m.Paused)), int64(flag(m.Behind)), m.Lag, int64(m.Owed)}
		if got != want {
			t.Fatalf("step %d: tenant %s (tag n cap wm est paused bh lg ow) %v, the model's %v", step, T, got, want)
		}
		if m.Owed > 0 {
			r.owed++
		}
		if ttl := rdb.PTTL(ctx, k.tenantKey(T)).Val(); (m.N > 0 || m.Waiting() > 0) && ttl != -1 {
			t.Fatalf("step %d: tenant %s has %d tasks in flight and %d waiting, and its record expires (PTTL %v)", step, T, m.N, m.Waiting(), ttl)
		}
	}
}

// compareLines compares each tenant's flows: their lines, and the set of
// flows other than "0" with their heads' park times.
func (r *replayer) compareLines(step int) {
	t, ctx, rdb, k := r.t, r.ctx, r.d.rdb, r.k
	for T, m := range r.model.Tenants {
		var members []string
		for f, line := range m.Lines {
			got := rdb.LRange(ctx, k.flowKey(T, f), 0, -1).Val()
			ids := make([]string, len(got))
			for i, s := range got {
				e, _ := parseWaitingEntry(s)
				ids[i] = e.id
			}
			want := make([]string, len(line))
			for i, w := range line {
				want[i] = w.ID
			}
			if !slices.Equal(ids, want) {
				t.Fatalf("step %d: tenant %s, flow %q: line %v, the model's %v", step, T, f, ids, want)
			}
			if f != "0" {
				members = append(members, fmt.Sprintf("%016d|%s", line[0].At, f))
			}
		}
		got := rdb.ZRange(ctx, k.flowsKey(T), 0, -1).Val()
		slices.Sort(got)
		slices.Sort(members)
		if !slices.Equal(got, members) {
			t.Fatalf("step %d: tenant %s: flows %q, the model's %q", step, T, got, members)
		}
	}
}

// compareKeys compares the keys' records.
func (r *replayer) compareKeys(step int) {
	t, ctx, rdb, k := r.t, r.ctx, r.d.rdb, r.k
	recs := rdb.Keys(ctx, k.prefix+"k:*").Val()
	if len(recs) != len(r.model.Keys) || rdb.SCard(ctx, k.keys).Val() != int64(len(r.model.Keys)) {
		t.Fatalf("step %d: %d key records (%v), the model has %d", step, len(recs), recs, len(r.model.Keys))
	}
	var withBlocked []string
	for K, m := range r.model.Keys {
		if len(m.Blocked) > 0 {
			withBlocked = append(withBlocked, K)
		}
	}
	slices.Sort(withBlocked)
	if got := rdb.ZRange(ctx, k.kw, 0, -1).Val(); !slices.Equal(got, withBlocked) {
		t.Fatalf("step %d: keys with tenants registered %v, the model's %v", step, got, withBlocked)
	}
	for K, m := range r.model.Keys {
		h := rdb.HGetAll(ctx, k.keyKey(K)).Val()
		asleep := rdb.ZScore(ctx, k.ksleep, K).Err() == nil
		got := [6]int64{atoi(h["n"]), atoi(h["cap"]), atoi(h["paused"]), atoi(h["w"]), atoi(h["ow"]), int64(flag(asleep))}
		want := [6]int64{int64(m.N), int64(m.Cap), int64(flag(m.Paused)), int64(m.Waiting), int64(m.Owed), int64(flag(m.Asleep))}
		if got != want {
			t.Fatalf("step %d: key %s (n cap paused w ow asleep) %v, the model's %v", step, K, got, want)
		}
		r.seen[3] += min(m.Owed, 1)
		blocked := map[string]int64{}
		for _, z := range rdb.ZRangeWithScores(ctx, k.blockedKey(K), 0, -1).Val() {
			blocked[z.Member.(string)] = int64(z.Score)
		}
		r.seen[0] += min(len(blocked), 1)
		r.seen[1] += int(flag(m.Cap > 0 && m.N >= m.Cap))
		r.seen[2] += int(flag(m.Asleep))
		if !maps.Equal(blocked, m.Blocked) {
			t.Fatalf("step %d: key %s: tenants registered %v, the model's %v", step, K, blocked, m.Blocked)
		}
	}
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// TestScriptsDeclareTheRulesConstants ties fair.lua's constants to the Go
// model's and the package's.
func TestScriptsDeclareTheRulesConstants(t *testing.T) {
	want := map[string]int64{
		"WEIGHT_SCALE":     rule.WeightScale,
		"DEFAULT_ESTIMATE": rule.DefaultEstimate,
		"TENANT_SMOOTHING": rule.TenantSmoothing,
		"QUEUE_SMOOTHING":  rule.QueueSmoothing,
		"LOAN_CHARGES":     rule.LoanCharges,
		"PARKED":           ParkedUntil.Unix(),
		"RESTART_GRACE":    DefaultRestartGrace.Microseconds(),
	}
	src := lua.FairPrelude()
	for name, v := range want {
		m := regexp.MustCompile(`(?m)^local ` + name + ` = (\d+)$`).FindStringSubmatch(src)
		if m == nil {
			t.Errorf("fair.lua declares no %s", name)
			continue
		}
		if got := atoi(m[1]); got != v {
			t.Errorf("fair.lua's %s = %d, Go's %d", name, got, v)
		}
	}
	e := waitingEntry{notBefore: 1, parked: 2, uniqueTTL: 3, id: "x|y"}
	if got, want := e.String(), "1|2|3|x|y"; got != want {
		t.Errorf("waiting entry %q, want %q", got, want)
	}
}

// TestRoomIsTheRules parks tasks of new tenants into a fair queue until
// one waits: as many go straight in as rule.Room gives.
func TestRoomIsTheRules(t *testing.T) {
	for _, c := range []int{1, 8, 16, 64} {
		d, _, _ := rig(t, admission.Quota{Limit: 100_000, Window: time.Second})
		ctx := context.Background()
		if _, err := d.run(ctx, d.scripts.dispatch, "default", fmt.Sprintf("w|%d|1", c), 600_000_000, 0, 0, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		if in, want := straightIns(t, d), rule.Room(c, 0); in != want {
			t.Errorf("concurrency %d: %d tasks went straight in, rule.Room says %d", c, in, want)
		}
	}
}

// straightIns parks tasks of new tenants into the default queue until one
// waits, and returns how many went straight in: the queue's room.
func straightIns(t *testing.T, d *Dispatcher) int {
	t.Helper()
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	for i := range 1000 {
		tk, err := d.Park(context.Background(), Task{Queue: "default", Tenant: fmt.Sprint("t", i), ID: fmt.Sprint("id", i)}, q)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Verdict != Straight {
			return i
		}
	}
	return 1000
}
