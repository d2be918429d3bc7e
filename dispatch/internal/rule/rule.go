// Package rule is the dispatcher's scheduling rule for one asynq queue, in
// Go: start-time fair queueing on measured worker time, with weights and
// caps. The dispatcher's scripts (lua/fair*.lua) keep the same state in
// Redis and make the same choices; package dispatch replays seeded
// workloads against both and fails on the first difference, and a seeded
// simulation on a logical clock checks the rule's shares against a
// max-min fair oracle.
//
// Virtual time is integer: a tag counts worker µs scaled by WeightScale
// over the tenant's weight in thousandths, so that a tenant of weight 1
// advances one unit per µs of work. A tenant that becomes runnable starts
// at the later of its own tag and the floor (the start tag of the latest
// grant), so an idle or blocked tenant banks no credit; a grant charges
// the tenant its estimated run time, and its finish corrects the charge
// with the time the task really ran.
//
// The model holds no clock and nothing of asynq: the scripts decide what
// is asleep, in limbo or gone from asynq, and tell the rule.
package rule

import "cmp"

// The rule's constants. fair.lua declares the same values; a test in
// package dispatch reads them from the script and compares.
const (
	// WeightScale is a weight of 1, in the integer weights the rule keeps
	// (thousandths).
	WeightScale = 1000
	// DefaultEstimate is the run time, in µs, charged a task of a queue
	// that has not measured one yet.
	DefaultEstimate = 10_000
	// TenantSmoothing and QueueSmoothing are the moving means' divisors:
	// a tenant's estimate moves a quarter of the way to each measured run
	// time, the queue's a sixteenth.
	TenantSmoothing = 4
	QueueSmoothing  = 16
)

// Weight returns w (a Quota.Weight, 0 meaning 1) in thousandths, at least
// 1.
func Weight(w float64) int64 {
	if w <= 0 {
		return WeightScale
	}
	return max(int64(w*WeightScale+0.5), 1)
}

// Charge is the virtual time x µs of worker time cost a tenant of weight
// wm (thousandths): floor(x × WeightScale / wm). It floors negative
// corrections too, as Lua's math.floor does.
func Charge(x, wm int64) int64 {
	return floorDiv(x*WeightScale, wm)
}

// Smooth moves a mean m a 1/div part of the way to x, in integers.
func Smooth(m, x, div int64) int64 {
	return m + floorDiv(x-m, div)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// Room is how many more tasks a fair queue takes when its live gate
// workers run total tasks at once and it holds inQueue (pending, active,
// granted or being written): the workers' concurrency and half as much
// again (at least 2). A granted task then waits behind at most half a
// round of work, and the workers still find a task when they finish while
// the dispatcher's turn that refills the queue is on its way (an eighth
// more starved them on 2 ms tasks; twice the concurrency kept light
// tenants waiting behind a whole round).
func Room(total, inQueue int) int {
	return total + max(2, total/2) - inQueue
}

// Tenant is one tenant's part of a queue.
type Tenant struct {
	// Tag is the start tag of its next task, unless the floor is later.
	Tag int64
	// N is how many of its tasks the dispatcher let in that asynq holds.
	N int
	// Cap is its MaxInFlight (0: none), Weight its weight in thousandths,
	// and Paused holds all of its waiting tasks.
	Cap    int
	Weight int64
	Paused bool
	// Estimate is its run time µs, a moving mean (0: none yet); Used the
	// worker time µs charged in total.
	Estimate, Used int64
	// Waiting are its waiting tasks' IDs, in order.
	Waiting []string
	// Asleep is set while the tenant is held back (by its rate).
	Asleep bool
}

// Run is a task the dispatcher let in: its tenant and the estimate it
// was charged (0 once a finish corrected it and it stays for a retry).
type Run struct {
	Tenant   string
	Estimate int64
}

// Grant is a task granted by Pick or Park.
type Grant struct {
	Tenant, ID string
	// Start is the start tag it was granted at.
	Start int64
}

// Queue is the rule's state for one queue. The zero value is not usable;
// make one with New.
type Queue struct {
	// Floor is the virtual time: the start tag of the latest grant, never
	// lower. Estimate is the queue's mean run time µs (0: none yet).
	Floor, Estimate int64
	Tenants         map[string]*Tenant
	// Runnable holds the start tag of each tenant that may go in now: one
	// with a task waiting, under its cap and awake. Like a sorted set, it
	// is ordered by tag, then by name.
	Runnable map[string]int64
	// InFlight are the tasks let in, by ID.
	InFlight map[string]Run
}

// New returns an empty queue.
func New() *Queue {
	return &Queue{Tenants: map[string]*Tenant{}, Runnable: map[string]int64{}, InFlight: map[string]Run{}}
}

// tenant returns T's record, made on first use.
func (q *Queue) tenant(T string) *Tenant {
	t := q.Tenants[T]
	if t == nil {
		t = &Tenant{Weight: WeightScale}
		q.Tenants[T] = t
	}
	return t
}

// Refresh puts T among the runnable tenants at the later of its tag and
// the floor when it has a task waiting, is under its cap and awake, and
// takes it out otherwise. Every change to a tenant ends with it.
func (q *Queue) Refresh(T string) {
	t := q.Tenants[T]
	if t == nil || len(t.Waiting) == 0 || t.Asleep || t.Paused || (t.Cap > 0 && t.N >= t.Cap) {
		delete(q.Runnable, T)
		return
	}
	q.Runnable[T] = max(t.Tag, q.Floor)
}

// Head returns the runnable tenant with the lowest start tag (ties by
// name), and false when none is.
func (q *Queue) Head() (string, int64, bool) {
	var best string
	var tag int64
	found := false
	for T, s := range q.Runnable {
		if !found || s < tag || (s == tag && T < best) {
			best, tag, found = T, s, true
		}
	}
	return best, tag, found
}

// Limits are what a tenant's quota says of its place in a queue now.
type Limits struct {
	// Cap is its MaxInFlight (0: none), Weight its weight in thousandths
	// (see Weight), and Paused holds its waiting tasks.
	Cap    int
	Weight int64
	Paused bool
}

// Set records T's limits as its quota says now.
func (q *Queue) Set(T string, l Limits) {
	t := q.tenant(T)
	t.Cap, t.Weight, t.Paused = l.Cap, l.Weight, l.Paused
}

// Update records the limits of T, if the queue has a record of it, and
// makes it runnable or not by them: a paused tenant resumes, in order, or
// a newly paused one stops going in.
func (q *Queue) Update(T string, l Limits) {
	if q.Tenants[T] != nil {
		q.Set(T, l)
		q.Refresh(T)
	}
}

// grant lets task id of T in at start tag start, charging its estimate.
func (q *Queue) grant(T, id string, start int64) Grant {
	t := q.tenant(T)
	est := cmp.Or(t.Estimate, q.Estimate, DefaultEstimate)
	q.InFlight[id] = Run{Tenant: T, Estimate: est}
	t.N++
	q.Floor = max(q.Floor, start)
	t.Tag = start + max(Charge(est, t.Weight), 1)
	return Grant{Tenant: T, ID: id, Start: start}
}

// Park decides a producer's task id of T (limits l, as its quota says now)
// when space more tasks may go into the queue: it goes straight in
// (granted at once, true) when T has nothing waiting, is awake, not paused
// and under its cap, no runnable tenant has an earlier start tag, and the
// queue has space; else it waits at the end of T's line (false).
func (q *Queue) Park(T, id string, l Limits, space int) (Grant, bool) {
	q.Set(T, l)
	t := q.Tenants[T]
	start := max(t.Tag, q.Floor)
	_, head, any := q.Head()
	if len(t.Waiting) == 0 && !t.Asleep && !l.Paused && (l.Cap == 0 || t.N < l.Cap) && (!any || start <= head) && space > 0 {
		return q.grant(T, id, start), true
	}
	t.Waiting = append(t.Waiting, id)
	q.Refresh(T)
	return Grant{}, false
}

// Pick grants up to most waiting tasks, at most space, the lowest start tag
// first; skip reports a waiting task that cannot go in (asynq no longer
// keeps it parked), which is dropped without holding its tenant back.
func (q *Queue) Pick(most, space int, skip func(id string) bool) []Grant {
	var out []Grant
	for most > 0 && space > 0 {
		T, start, ok := q.Head()
		if !ok {
			break
		}
		t := q.Tenants[T]
		id := t.Waiting[0]
		t.Waiting = t.Waiting[1:]
		if skip == nil || !skip(id) {
			out = append(out, q.grant(T, id, start))
			most, space = most-1, space-1
		}
		q.Refresh(T)
	}
	return out
}

// Finish hands in task id, which ran for ran µs: its tenant is charged
// what it ran less the estimate it was charged at its grant, and the
// estimates move towards ran. A task that is done leaves; one asynq will
// retry keeps its place, to be charged in full when it runs again. l are
// its tenant's limits now (Cap -1: unknown, keep what it has); hold puts the tenant to sleep (a downstream
// service throttled it: worker.Throttled).
func (q *Queue) Finish(id string, ran int64, done bool, l Limits, hold bool) {
	r, ok := q.InFlight[id]
	if !ok {
		return
	}
	if l.Cap >= 0 { // else the quota could not be read: the tenant keeps its limits
		q.Set(r.Tenant, l)
	}
	if hold {
		q.Tenants[r.Tenant].Asleep = true
	}
	t := q.Tenants[r.Tenant]
	t.Tag += Charge(ran-r.Estimate, t.Weight)
	if t.Estimate == 0 {
		t.Estimate = ran
	} else {
		t.Estimate = Smooth(t.Estimate, ran, TenantSmoothing)
	}
	t.Used += ran
	if q.Estimate == 0 {
		q.Estimate = ran
	} else {
		q.Estimate = Smooth(q.Estimate, ran, QueueSmoothing)
	}
	if done {
		q.Free(id)
		return
	}
	q.InFlight[id] = Run{Tenant: r.Tenant}
	q.Refresh(r.Tenant)
}

// Free takes task id out of flight without a charge: its tenant may go in
// again.
func (q *Queue) Free(id string) {
	r, ok := q.InFlight[id]
	if !ok {
		return
	}
	delete(q.InFlight, id)
	t := q.Tenants[r.Tenant]
	t.N = max(t.N-1, 0)
	q.Refresh(r.Tenant)
	q.settle(r.Tenant)
}

// Back returns a granted task that could not go in yet (its rate said
// later) to the head of its tenant's line, refunding its charge; asleep
// holds the tenant back.
func (q *Queue) Back(id string, asleep bool) {
	r, ok := q.InFlight[id]
	if !ok {
		return
	}
	delete(q.InFlight, id)
	t := q.Tenants[r.Tenant]
	t.Tag -= Charge(r.Estimate, t.Weight)
	t.N = max(t.N-1, 0)
	t.Waiting = append([]string{id}, t.Waiting...)
	t.Asleep = t.Asleep || asleep
	q.Refresh(r.Tenant)
}

// Wake ends T's sleep.
func (q *Queue) Wake(T string) {
	if t := q.Tenants[T]; t != nil {
		t.Asleep = false
		q.Refresh(T)
	}
}

// settle forgets an idle tenant (nothing of it waits or runs) that owes
// nothing: its tag is not ahead of the floor. One that owes is kept until
// the queue goes idle (Forgive), or for an hour in the scripts.
func (q *Queue) settle(T string) {
	if t := q.Tenants[T]; q.idle(t) && t.Tag <= q.Floor {
		delete(q.Tenants, T)
	}
}

func (q *Queue) idle(t *Tenant) bool { return t.N == 0 && len(t.Waiting) == 0 }

// Forgive forgets every idle tenant's debt once nothing waits or runs in
// the queue: with no one to be fair to, a debt only keeps a record. The
// scripts do this at the end of each dispatch turn.
func (q *Queue) Forgive() {
	if len(q.InFlight) > 0 || len(q.Runnable) > 0 {
		return
	}
	for _, t := range q.Tenants {
		if t.Asleep {
			return
		}
	}
	for T, t := range q.Tenants {
		if q.idle(t) {
			delete(q.Tenants, T)
		}
	}
}
