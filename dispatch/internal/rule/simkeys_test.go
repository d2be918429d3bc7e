package rule

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// The keyed simulation runs the rule on a logical clock with tasks that
// carry priorities and concurrency keys: keys capped across tenants, one
// paused for a while and then resumed, tenants capped or not. Its oracle
// keeps its own books (what runs, what waits, which keys have room) and
// checks after every step: no key over its cap and nothing of a paused key
// started; every task run exactly once; FIFO within a flow; within a
// tenant, no task started while one of higher priority (or of the same
// priority, parked earlier) could have gone; and no worker free while a
// task that its tenant and keys allow waits (no head-of-line blocking,
// work conservation). A dispatcher that keeps one FIFO line per tenant,
// blocked by its head, must fail it.

// keyedTask is a task of the keyed simulation.
type keyedTask struct {
	id, tenant string
	prio       int
	keys       []string
	flow       string
	arrived    int64
	run        int64
}

// keyedWorkload is a seeded keyed workload.
type keyedWorkload struct {
	workers    int
	tenantCaps map[string]int
	keyCaps    map[string]int
	paused     string // a key paused from the start until resumeAt
	resumeAt   int64
	tasks      []keyedTask // in arrival order
}

func randomKeyedWorkload(rng *rand.Rand) keyedWorkload {
	w := keyedWorkload{workers: 4 + rng.IntN(13), tenantCaps: map[string]int{}, keyCaps: map[string]int{},
		paused: "k:paused", resumeAt: 300_000 + int64(rng.IntN(300_000))}
	keys := []string{"api:a", "api:b", "k:paused"}
	w.keyCaps["api:a"] = 1 + rng.IntN(3)
	w.keyCaps["api:b"] = 2 + rng.IntN(4)
	nt := 3 + rng.IntN(4)
	var at int64
	for i := range 400 + rng.IntN(400) {
		T := fmt.Sprintf("t%d", rng.IntN(nt))
		if _, ok := w.tenantCaps[T]; !ok {
			w.tenantCaps[T] = []int{0, 0, 1, 2, 3}[rng.IntN(5)]
		}
		var ks []string
		for _, k := range keys {
			if rng.IntN(4) == 0 {
				ks = append(ks, k)
			}
		}
		p := []int{0, 0, 0, 1, 2, -1}[rng.IntN(6)]
		at += int64(rng.IntN(2000))
		w.tasks = append(w.tasks, keyedTask{id: fmt.Sprintf("%s-%04d", T, i), tenant: T, prio: p, keys: ks,
			flow: FlowID(p, ks), arrived: at, run: 1000 + int64(rng.IntN(20_000))})
	}
	return w
}

// keyedPolicy is a dispatcher under the keyed simulation.
type keyedPolicy interface {
	park(t keyedTask, space int) bool
	pick(space int) []Grant
	finish(id string, ran int64)
	resume(key string)
}

// keyedFair is the rule.
type keyedFair struct {
	q *Queue
	w keyedWorkload
}

func (f *keyedFair) limits(keys []string, paused bool) map[string]KeyLimits {
	m := map[string]KeyLimits{}
	for _, k := range keys {
		m[k] = KeyLimits{Cap: f.w.keyCaps[k], Paused: paused && k == f.w.paused}
	}
	return m
}

func (f *keyedFair) park(t keyedTask, space int) bool {
	_, in := f.q.Park(Task{Tenant: t.tenant, ID: t.id, Flow: t.flow, At: t.arrived},
		Limits{Cap: f.w.tenantCaps[t.tenant], Weight: WeightScale}, f.limits(t.keys, t.arrived < f.w.resumeAt), space)
	return in
}
func (f *keyedFair) pick(space int) []Grant { return f.q.Pick(space, space, nil) }
func (f *keyedFair) finish(id string, ran int64) {
	f.q.Finish(id, ran, true, Limits{Cap: -1}, false, "")
}
func (f *keyedFair) resume(key string) { f.q.UpdateKey(key, KeyLimits{Cap: f.w.keyCaps[key]}) }

// headOfLine is the negative control: one FIFO line per tenant, taken in
// turn, whose head blocks the line while its keys are closed.
type headOfLine struct {
	w       keyedWorkload
	lines   map[string][]keyedTask
	order   []string
	next    int
	running map[string]int // by tenant and by key
	flight  map[string]keyedTask
	resumed bool
}

func (h *headOfLine) park(t keyedTask, _ int) bool {
	if _, ok := h.lines[t.tenant]; !ok {
		h.order = append(h.order, t.tenant)
	}
	h.lines[t.tenant] = append(h.lines[t.tenant], t)
	return false
}

func (h *headOfLine) open(t keyedTask) bool {
	if c := h.w.tenantCaps[t.tenant]; c > 0 && h.running[t.tenant] >= c {
		return false
	}
	for _, k := range t.keys {
		if (k == h.w.paused && !h.resumed) || (h.w.keyCaps[k] > 0 && h.running[k] >= h.w.keyCaps[k]) {
			return false
		}
	}
	return true
}

func (h *headOfLine) pick(space int) []Grant {
	var out []Grant
	for tries := 0; space > 0 && tries < len(h.order); tries++ {
		T := h.order[h.next%len(h.order)]
		h.next++
		if l := h.lines[T]; len(l) > 0 && h.open(l[0]) {
			t := l[0]
			h.lines[T] = l[1:]
			h.running[T]++
			for _, k := range t.keys {
				h.running[k]++
			}
			h.flight[t.id] = t
			out = append(out, Grant{Tenant: T, ID: t.id})
			space--
			tries = -1
		}
	}
	return out
}

func (h *headOfLine) finish(id string, _ int64) {
	t := h.flight[id]
	delete(h.flight, id)
	h.running[t.tenant]--
	for _, k := range t.keys {
		h.running[k]--
	}
}
func (h *headOfLine) resume(string) { h.resumed = true }

var simHook func(keyedTask)

// simulateKeyed runs w under p and returns the oracle's findings.
func simulateKeyed(w keyedWorkload, p keyedPolicy) []string {
	var problems []string
	fail := func(format string, args ...any) {
		if len(problems) < 10 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	byID := map[string]keyedTask{}
	for _, t := range w.tasks {
		byID[t.id] = t
	}
	var evs events
	var now int64
	free := w.workers
	resumed := false
	running := map[string]int{} // by tenant and by key
	waiting := map[string][]keyedTask{}
	started := map[string]bool{}
	flowStarts := map[string][]string{}
	// open reports whether t's tenant and keys allow it now, by the
	// oracle's books.
	open := func(t keyedTask) bool {
		if c := w.tenantCaps[t.tenant]; c > 0 && running[t.tenant] >= c {
			return false
		}
		for _, k := range t.keys {
			if (k == w.paused && !resumed) || (w.keyCaps[k] > 0 && running[k] >= w.keyCaps[k]) {
				return false
			}
		}
		return true
	}
	start := func(g Grant) {
		t := byID[g.ID]
		if started[t.id] {
			fail("task %s started twice", t.id)
		}
		// Within its tenant, nothing that goes first could have gone.
		for _, o := range waiting[t.tenant] {
			if o.id != t.id && open(o) && (o.prio > t.prio || (o.prio == t.prio && o.arrived < t.arrived && o.flow != t.flow)) {
				fail("at %d µs %s (priority %d) started while %s (priority %d, parked earlier or higher) could go", now, t.id, t.prio, o.id, o.prio)
				break
			}
		}
		if !open(t) {
			fail("at %d µs %s started though its tenant or a key is closed", now, t.id)
		}
		started[t.id] = true
		waiting[t.tenant] = slices.DeleteFunc(waiting[t.tenant], func(o keyedTask) bool { return o.id == t.id })
		flowStarts[t.tenant+"/"+t.flow] = append(flowStarts[t.tenant+"/"+t.flow], t.id)
		running[t.tenant]++
		for _, k := range t.keys {
			running[k]++
		}
		free--
		heap.Push(&evs, event{at: now + t.run, id: t.id, ran: t.run})
	}
	next := 0
	arrive := func() {
		for next < len(w.tasks) && w.tasks[next].arrived <= now {
			t := w.tasks[next]
			next++
			waiting[t.tenant] = append(waiting[t.tenant], t)
			if p.park(t, free) {
				start(Grant{Tenant: t.tenant, ID: t.id})
			}
		}
	}
	for {
		arrive()
		for _, g := range p.pick(free) {
			start(g)
		}
		if free > 0 {
			for _, ts := range waiting {
				if i := slices.IndexFunc(ts, open); i >= 0 {
					fail("at %d µs a worker is free while %s could go in", now, ts[i].id)
					if simHook != nil {
						simHook(ts[i])
					}
					break
				}
			}
		}
		// The next event: a task ends, a task arrives, or the pause ends.
		at := int64(-1)
		if evs.Len() > 0 {
			at = evs[0].at
		}
		if next < len(w.tasks) && (at < 0 || w.tasks[next].arrived < at) {
			at = w.tasks[next].arrived
		}
		if !resumed && (at < 0 || w.resumeAt <= at) {
			now, resumed = max(now, w.resumeAt), true
			p.resume(w.paused)
			continue
		}
		if at < 0 {
			break
		}
		now = at
		if evs.Len() > 0 && evs[0].at == now {
			e := heap.Pop(&evs).(event)
			t := byID[e.id]
			free++
			running[t.tenant]--
			for _, k := range t.keys {
				running[k]--
			}
			p.finish(e.id, e.ran)
		}
	}
	for _, t := range w.tasks {
		if !started[t.id] {
			fail("task %s never started", t.id)
		}
	}
	for _, t := range w.tasks {
		ids := flowStarts[t.tenant+"/"+t.flow]
		var want []string
		for _, o := range w.tasks {
			if o.tenant == t.tenant && o.flow == t.flow {
				want = append(want, o.id)
			}
		}
		if !slices.Equal(ids, want) {
			fail("tenant %s, flow %q: tasks started out of their order", t.tenant, t.flow)
			break
		}
	}
	return problems
}

func TestKeyedSimulationKeepsKeysFlowsAndWorkers(t *testing.T) {
	for seed := uint64(1); seed <= 12; seed++ {
		w := randomKeyedWorkload(rand.New(rand.NewPCG(seed, 3)))
		q := New()
		for _, p := range simulateKeyed(w, &keyedFair{q: q, w: w}) {
			t.Errorf("seed %d: %s", seed, p)
		}
		q.Forgive()
		if len(q.Keys) != 0 || len(q.InFlight) != 0 || len(q.Tenants) != 0 {
			t.Errorf("seed %d: after the run the queue keeps %d keys, %d tasks in flight, %d tenants", seed, len(q.Keys), len(q.InFlight), len(q.Tenants))
		}
	}
}

func TestKeyedSimulationHeadOfLineFailsTheOracle(t *testing.T) {
	failed := 0
	for seed := uint64(1); seed <= 12; seed++ {
		w := randomKeyedWorkload(rand.New(rand.NewPCG(seed, 3)))
		h := &headOfLine{w: w, lines: map[string][]keyedTask{}, running: map[string]int{}, flight: map[string]keyedTask{}}
		if len(simulateKeyed(w, h)) > 0 {
			failed++
		}
	}
	if failed < 12 {
		t.Errorf("a head-of-line dispatcher passed the keyed oracle on %d of 12 seeds", 12-failed)
	}
}
