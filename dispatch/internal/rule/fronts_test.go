package rule

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// The front of the queue. The dispatcher moves a grant that Fronts into
// asynq's pending list at the end the workers take from, right behind its
// tenant's previous task if that is still pending, and every other grant
// at the far end; the list holds the queue's slack (Room) besides the
// running tasks. This simulation keeps such a list on a logical clock, with
// no latency at all, and checks what fronting promises: a tenant its cap
// holds below its share uses clearly more of its cap than without fronts
// (its places are not spent waiting behind the slack); every task runs,
// each tenant's in order, and no tenant ever has more than its cap pending
// or running; and a task is passed by a bounded number of fronted grants.
// Fronting every capped tenant's grant, whether or not its cap holds it
// back, must break that bound. The same holds for a concurrency key that
// tenants share (KeyFronts): its places count pending tasks as a tenant's
// cap does.
//
// Here a capped tenant uses 98.3–100 % of its cap in the busy queue on
// the seeds below (99.3–100 % with every capped grant at the front, 64–78 %
// with none): the rule picks it by start tag like any other, and a loan
// (Lent) gives back at most LoanCharges of what the floor gained on it,
// so a finish that comes after a longer run of grants waits for the floor
// (sim_test.go's oracle allows the same). With a loan of one charge given
// back once, the rule before LoanCharges, it used 92–97 %.
//
// A key capped at 4 that eight tenants share beside two keyless ones
// (sharedKey) runs 96–100 % of its cap (59–87 % with no fronts), and no
// task is passed more than 10 times; a key that binds without holding
// its tenants below their share (looseKey) passes a task at most 8 times.

// placement decides where a grant goes in the pending list: true for the
// front.
type placement func(g Grant, t simTenant) bool

// keyUse is the name under which frontResult.capUse holds key K's use of
// its cap.
func keyUse(K string) string { return "key " + K }

var (
	byRule     placement = func(g Grant, _ simTenant) bool { return g.Front }
	neverFront placement = func(Grant, simTenant) bool { return false }
	// everyCapped fronts every grant of a capped tenant: the stand-in
	// build's placement (lua/floor/frontall.lua), not a rule.
	everyCapped placement = func(_ Grant, t simTenant) bool { return t.cap > 0 }
	// everyKeyed fronts every grant of a task that carries a capped key.
	everyKeyed placement = func(_ Grant, t simTenant) bool { return t.keyCap > 0 }
)

// queued is a task in the simulated pending list.
type queued struct {
	tenant, id string
	passed     int // fronted grants that went in ahead of it
}

// frontResult is what a simulation with a pending list measured.
type frontResult struct {
	// capUse is each capped tenant's mean running tasks over its cap,
	// while it had tasks waiting.
	capUse map[string]float64
	// mostPassed is the most fronted grants any task was passed by.
	mostPassed int
	// grantedAtFinish is, of each capped tenant's finishes with tasks of
	// it still waiting, the share after which the same pick granted it.
	grantedAtFinish map[string]float64
	findings
}

// simulateFronts runs backlogged tenants on workers with a pending list
// placed by place, seeded, until every task has run.
func simulateFronts(workers int, tenants []simTenant, place placement, seed uint64) frontResult {
	rng := rand.New(rand.NewPCG(seed, 2))
	q := New()
	res := frontResult{capUse: map[string]float64{}, grantedAtFinish: map[string]float64{}}
	byName := map[string]simTenant{}
	order := map[string][]string{}
	for _, t := range tenants {
		byName[t.name] = t
		flow, keys := "0", map[string]KeyLimits(nil)
		if t.key != "" {
			flow, keys = FlowID(0, []string{t.key}), map[string]KeyLimits{t.key: {Cap: t.keyCap}}
		}
		for i := range t.backlog {
			id := fmt.Sprintf("%s-%05d", t.name, i)
			order[t.name] = append(order[t.name], id)
			if _, in := q.Park(Task{Tenant: t.name, ID: id, Flow: flow, At: int64(i)}, Limits{Cap: t.cap, Weight: Weight(t.weight)}, keys, 0); in {
				res.fail("%s went straight in with no space", id)
			}
		}
	}
	var (
		now      int64
		evs      events
		pending  []queued // index 0: the end the workers take from
		running  = map[string]int{}
		inQueue  = map[string]int{} // pending or running, by tenant
		started  = map[string][]string{}
		waiting  = map[string]int{}
		busyArea = map[string]int64{} // running × µs while tasks wait
		finishes = map[string]int{}   // of capped tenants, with tasks waiting
		regrants = map[string]int{}   // of those, granted in the next pick
		finished string               // the capped tenant that just finished a task, if any
		waitTime = map[string]int64{}
	)
	for _, t := range tenants {
		waiting[t.name] = t.backlog
	}
	// The same, by key.
	var (
		keyRunning = map[string]int{}
		inKey      = map[string]int{}
		keyWaiting = map[string]int{}
	)
	for _, t := range tenants {
		if t.key != "" {
			keyWaiting[t.key] += t.backlog
		}
	}
	free := workers
	for {
		space := Room(workers, len(pending)+workers-free)
		picks := q.Pick(2*workers, space, nil) // as a worker's turn: most twice its concurrency
		if finished != "" && slices.ContainsFunc(picks, func(g Grant) bool { return g.Tenant == finished }) {
			regrants[finished]++
		}
		finished = ""
		for _, g := range picks {
			t := byName[g.Tenant]
			waiting[t.name]--
			inQueue[t.name]++
			if t.cap > 0 && inQueue[t.name] > t.cap {
				res.fail("tenant %s has %d tasks pending or running, cap %d", t.name, inQueue[t.name], t.cap)
			}
			if t.key != "" {
				keyWaiting[t.key]--
				if inKey[t.key]++; t.keyCap > 0 && inKey[t.key] > t.keyCap {
					res.fail("key %s has %d tasks pending or running, cap %d", t.key, inKey[t.key], t.keyCap)
				}
			}
			task := queued{tenant: g.Tenant, id: g.ID}
			if !place(g, t) {
				pending = append(pending, task)
				continue
			}
			// Right behind the tenant's own last pending task, else at the
			// front; everything behind it is passed.
			at := 0
			for i := len(pending) - 1; i >= 0; i-- {
				if pending[i].tenant == g.Tenant {
					at = i + 1
					break
				}
			}
			for i := at; i < len(pending); i++ {
				pending[i].passed++
				res.mostPassed = max(res.mostPassed, pending[i].passed)
			}
			pending = slices.Insert(pending, at, task)
		}
		for free > 0 && len(pending) > 0 {
			task := pending[0]
			pending = pending[1:]
			t := byName[task.tenant]
			started[t.name] = append(started[t.name], task.id)
			running[t.name]++
			keyRunning[t.key]++
			free--
			ran := t.run/2 + rng.Int64N(t.run+1)
			heap.Push(&evs, event{at: now + ran, id: task.id, ran: ran, tenant: slices.IndexFunc(tenants, func(x simTenant) bool { return x.name == t.name })})
		}
		if evs.Len() == 0 {
			break
		}
		e := heap.Pop(&evs).(event)
		// The time up to this event, for the capped tenants' use, as it
		// stood since the last one.
		for _, t := range tenants {
			if t.cap > 0 && waiting[t.name] > 0 {
				busyArea[t.name] += int64(running[t.name]) * (e.at - now)
				waitTime[t.name] += e.at - now
			}
		}
		for K, n := range keyWaiting {
			if n > 0 {
				busyArea[keyUse(K)] += int64(keyRunning[K]) * (e.at - now)
				waitTime[keyUse(K)] += e.at - now
			}
		}
		now = e.at
		t := tenants[e.tenant]
		running[t.name]--
		inQueue[t.name]--
		keyRunning[t.key]--
		inKey[t.key]--
		free++
		q.Finish(e.id, e.ran, true, Limits{Cap: t.cap, Weight: Weight(t.weight)}, false, "")
		if t.cap > 0 && waiting[t.name] > 0 {
			finished = t.name
			finishes[t.name]++
		}
	}
	for _, t := range tenants {
		if !slices.Equal(started[t.name], order[t.name]) {
			res.fail("tenant %s: %d of %d tasks started, or out of order", t.name, len(started[t.name]), len(order[t.name]))
		}
		if t.cap > 0 && waitTime[t.name] > 0 {
			res.capUse[t.name] = float64(busyArea[t.name]) / float64(waitTime[t.name]) / float64(t.cap)
		}
		if finishes[t.name] > 0 {
			res.grantedAtFinish[t.name] = float64(regrants[t.name]) / float64(finishes[t.name])
		}
		if K := keyUse(t.key); t.key != "" && waitTime[K] > 0 {
			res.capUse[K] = float64(busyArea[K]) / float64(waitTime[K]) / float64(t.keyCap)
		}
	}
	return res
}

// busyQueue is the bench's busy queue: a tenant capped at 4 whose fair
// share of 16 workers is 5.3, beside two backlogged tenants.
func busyQueue(rng *rand.Rand) (int, []simTenant) {
	run := func() int64 { return int64(5_000 + rng.IntN(30_000)) }
	return 16, []simTenant{
		{name: "capped", weight: 1, cap: 4, run: run(), backlog: 400},
		{name: "busy1", weight: 1, run: run(), backlog: 3000},
		{name: "busy2", weight: 1, run: run(), backlog: 3000},
	}
}

// sharedKey is the flow bench's shared key, scaled down: eight tenants'
// tasks carry a key capped at 4 (their share of 16 workers is 12.8),
// beside two keyless backlogged tenants.
func sharedKey(rng *rand.Rand) (int, []simTenant) {
	ts := []simTenant{
		{name: "open1", weight: 1, run: int64(5_000 + rng.IntN(30_000)), backlog: 1500},
		{name: "open2", weight: 1, run: int64(5_000 + rng.IntN(30_000)), backlog: 1500},
	}
	for i := range 8 {
		ts = append(ts, simTenant{name: fmt.Sprintf("keyed%d", i), weight: 1, run: int64(5_000 + rng.IntN(30_000)), backlog: 60, key: "api", keyCap: 4})
	}
	return 16, ts
}

// looseKey is a key capped above what its tenants' share ever holds.
func looseKey(rng *rand.Rand) (int, []simTenant) {
	ts := []simTenant{{name: "open", weight: 1, run: int64(5_000 + rng.IntN(20_000)), backlog: 1500}}
	for i := range 2 {
		ts = append(ts, simTenant{name: fmt.Sprintf("keyed%d", i), weight: 1, run: int64(5_000 + rng.IntN(20_000)), backlog: 1500, key: "api", keyCap: 12})
	}
	return 12, ts
}

// looseCaps has caps that do not hold anyone below a fair share, and add
// up to more than the workers, beside an uncapped tenant.
func looseCaps(rng *rand.Rand) (int, []simTenant) {
	ts := []simTenant{{name: "open", weight: 1, run: int64(5_000 + rng.IntN(20_000)), backlog: 1500}}
	for i := range 4 {
		ts = append(ts, simTenant{name: fmt.Sprintf("loose%d", i), weight: 1, cap: 6, run: int64(5_000 + rng.IntN(20_000)), backlog: 1500})
	}
	return 12, ts
}

// Fronts lift a capped tenant's use of its cap in the busy queue, and a
// shared key's in sharedKey, by at least a tenth.
func TestFrontsLetACapRunMoreOfItself(t *testing.T) {
	for _, c := range []struct {
		mk  func(*rand.Rand) (int, []simTenant)
		use string // the name capUse gives the cap
	}{{busyQueue, "capped"}, {sharedKey, keyUse("api")}} {
		for seed := uint64(1); seed <= 8; seed++ {
			workers, ts := c.mk(rand.New(rand.NewPCG(seed, 0)))
			front := simulateFronts(workers, ts, byRule, seed)
			back := simulateFronts(workers, ts, neverFront, seed)
			for _, p := range append(front.problems, back.problems...) {
				t.Errorf("seed %d: %s", seed, p)
			}
			t.Logf("seed %d: %s's use of its cap %.2f with fronts, %.2f without; most passes %d", seed, c.use, front.capUse[c.use], back.capUse[c.use], front.mostPassed)
			if front.capUse[c.use] < back.capUse[c.use]+0.1 {
				t.Errorf("seed %d: %s used %.2f of its cap with fronts, %.2f without: want at least a tenth more", seed, c.use, front.capUse[c.use], back.capUse[c.use])
			}
		}
	}
}

// A tenant its cap holds below its share gets back, on a loan, what the
// floor gained on it while it waited at its cap, so the finishes of a
// cluster are granted their successors at once: 97.7–99.8 % of them on
// these seeds, where a loan given back once and of one charge at most (the
// rule before LoanCharges) left 13–18 % waiting for the floor, and the
// tenant used 92–97 % of its cap.
func TestACappedTenantBelowItsShareIsGrantedAtItsFinishes(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		workers, ts := busyQueue(rand.New(rand.NewPCG(seed, 0)))
		r := simulateFronts(workers, ts, byRule, seed)
		if got := r.grantedAtFinish["capped"]; got < 0.95 {
			t.Errorf("seed %d: %.1f %% of the capped tenant's finishes were followed by a grant of it, want at least 95 %%", seed, 100*got)
		}
		if got := r.capUse["capped"]; got < 0.98 {
			t.Errorf("seed %d: the capped tenant used %.1f %% of its cap, want at least 98 %%", seed, 100*got)
		}
	}
}

func TestFrontsPassATaskABoundedNumberOfTimes(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		for _, mk := range []func(*rand.Rand) (int, []simTenant){busyQueue, looseCaps, sharedKey, looseKey} {
			workers, ts := mk(rand.New(rand.NewPCG(seed, 0)))
			r := simulateFronts(workers, ts, byRule, seed)
			for _, p := range r.problems {
				t.Errorf("seed %d: %s", seed, p)
			}
			if r.mostPassed > 2*workers {
				t.Errorf("seed %d, %d workers, tenants %v: a task was passed by %d fronted grants, want at most %d", seed, workers, names(ts), r.mostPassed, 2*workers)
			}
		}
	}
}

// The bound comes from the rule's choice of whom to front: fronting every
// capped tenant's grant lets caps that do not bind pass the uncapped
// tenant's tasks again and again (by 66 to 1,852 grants on these seeds,
// against at most 21 by the rule), and so does fronting every grant of a
// key's task (by 91 to 1,057 in looseKey, against at most 8). A key is at
// its cap more often than it holds anyone back, for its places count
// pending tasks: fronting every grant that fills a place its cap took
// back, which KeyFronts does only for a tenant held below its share,
// passed a task 74 to 1,052 times there.
func TestFrontingEveryCappedGrantBreaksTheBound(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		for _, c := range []struct {
			mk    func(*rand.Rand) (int, []simTenant)
			place placement
		}{{looseCaps, everyCapped}, {looseKey, everyKeyed}} {
			workers, ts := c.mk(rand.New(rand.NewPCG(seed, 0)))
			if r := simulateFronts(workers, ts, c.place, seed); r.mostPassed <= 4*workers {
				t.Errorf("seed %d, tenants %v: fronting every capped grant passed a task at most %d times, within 4 × the %d workers; the bound must tell it from the rule", seed, names(ts), r.mostPassed, workers)
			}
		}
	}
}

func names(ts []simTenant) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.name)
	}
	return out
}

// A full queue takes only grants owed a place: a capped tenant whose task
// ended while its cap held it back is granted its next task, at the front,
// where the queue has no space for anyone else; a tenant owed nothing is
// not, and the owed place is granted once.
func TestAFullQueueGrantsOnlyAPlaceOwed(t *testing.T) {
	fullQueueOwes(t, Limits{Cap: 2, Weight: Weight(1)}, "0", nil, "c2", func(q *Queue) int { return q.Tenants["a"].Owed })
}

// The same holds for a key's cap: a task carrying a key ended while the
// key was at its cap with tasks waiting on it, and the next of those, of
// a tenant the key held below its share, goes in at the front of a full
// queue, once.
func TestAFullQueueGrantsAPlaceAKeyTookBack(t *testing.T) {
	fullQueueOwes(t, Limits{Weight: Weight(1)}, FlowID(0, []string{"api"}), map[string]KeyLimits{"api": {Cap: 1}}, "c1",
		func(q *Queue) int { return q.Keys["api"].Owed })
}

// fullQueueOwes runs a tenant "a" with limits l and four tasks of flow f
// (keys), beside a tenant with eight tasks and no limits, in a queue of
// space 6: a's task "c0" ends where a's cap or key holds it back, and the
// full queue grants next at the front, once; owed reads the places owed.
func fullQueueOwes(t *testing.T, l Limits, f string, keys map[string]KeyLimits, next string, owed func(*Queue) int) {
	q := New()
	open := Limits{Weight: Weight(1)}
	for i := range 8 {
		q.Park(Task{Tenant: "u", ID: fmt.Sprintf("u%d", i), Flow: "0"}, open, nil, 0)
	}
	for i := range 4 {
		q.Park(Task{Tenant: "a", ID: fmt.Sprintf("c%d", i), Flow: f, At: int64(i)}, l, keys, 0)
	}
	// a takes what its cap or key allows; u goes on alone, and the floor
	// passes a's tag.
	if got := q.Pick(6, 6, nil); len(got) != 6 {
		t.Fatalf("the first pick granted %v, want 6 grants", got)
	}
	if g := q.Pick(8, 0, nil); len(g) != 0 {
		t.Fatalf("a full queue with no place owed granted %v", g)
	}
	q.Finish("u0", 1000, true, open, false, "")
	if g := q.Pick(8, 0, nil); len(g) != 0 {
		t.Fatalf("a full queue granted %v after an unlimited tenant's finish", g)
	}
	q.Finish("c0", 1000, true, l, false, "")
	if n := owed(q); n != 1 {
		t.Fatalf("%d places owed after c0's finish where it was held back; want 1", n)
	}
	g := q.Pick(8, 0, nil)
	if len(g) != 1 || g[0].ID != next || !g[0].Front {
		t.Fatalf("a full queue granted %+v after c0's finish, want %s at the front", g, next)
	}
	if g := q.Pick(8, 0, nil); len(g) != 0 {
		t.Fatalf("a full queue granted %v once the place owed was filled", g)
	}
	if n := owed(q); n != 0 {
		t.Fatalf("%d places owed once the place was filled, want 0", n)
	}
}
