package dispatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch/internal/rule"
)

const (
	// heartbeat is how long a worker's record lasts without renewal; its
	// loops renew it at least every idleTick.
	heartbeat = 3 * time.Second
	idleTick  = time.Second
	// busyTick is how often a loop looks again while tenants wait with no
	// finish to wake it (the queue is full, or they sleep on their rate).
	busyTick = 50 * time.Millisecond
	// repairEvery is how often a loop checks a page of its queue's tasks
	// in flight against asynq.
	repairEvery = 2 * time.Second
	callTimeout = 2 * time.Second
	// firstRetry is how long a loop waits before it hands in again a
	// finish of a task asynq has yet to mark done (it does so a moment
	// after the handler returns); the wait doubles up to a second.
	firstRetry = 250 * time.Microsecond
	// gatherFor and gatherMost are the shortest and the longest a loop
	// lets finishes gather for its next turn, so that one turn hands in
	// several: so long that a gathering and a refill (pace) fit
	// gatherSpare times in the time asynq's pending list keeps the queue's
	// workers busy, at the rate they finish tasks, so that they never find
	// it empty meanwhile (an asynq worker that does waits for the next
	// move). A refill takes the turn that grants, the admissions and the
	// turn that moves the grants in: counting only the first turn and the
	// admissions, 16 workers on 2 ms tasks found the list empty about every
	// 5 ms and drained at 0.82-0.84x bare asynq; counting the refill,
	// 0.91-0.92x (medians of two invocations each, alternated). A
	// turn costs Redis about as much for one finish as for ten, and Redis
	// answers every call, asynq's dequeues among them, later the busier it
	// is: on 2 ms tasks, gathering from 1 ms with three times the spare
	// left turns of two or three finishes, 46 commands a task and the
	// drain at 0.77-0.92x bare asynq (mean 0.81, eight runs); from 250 µs
	// with half as much again to spare, 40-42 commands and 0.80-0.88x
	// (mean 0.85).
	gatherFor   = 250 * time.Microsecond
	gatherMost  = 4 * time.Millisecond
	gatherSpare = 1.5
	// syncEvery is how often a loop looks up the quotas of its queue's
	// paused tenants, the next syncTenants in line and its keys: with the
	// quota cache's admission.DefaultRefresh, a pause or a resume reaches
	// the queue within about a second. The lookups are served from that
	// cache; each costs Redis one pipelined read.
	syncEvery   = 250 * time.Millisecond
	syncTenants = 100
	// resendEvery is how often a loop hands in those limits again, changed
	// or not: a producer or worker that acted on a quota it read before a
	// change (its cache serves a stale quota while it rereads it) may have
	// written the old limits back since, and nothing else would put the
	// current ones back while the loop's own view stays the same.
	resendEvery = 2 * time.Second
	// fleetEvery is how often a loop that reports no stats reads them,
	// to warn of asynq servers without a gate on its queue.
	fleetEvery = time.Minute
	// handOffWait is the longest Done holds a worker's slot for its
	// tenant's next task.
	handOffWait = 5 * time.Millisecond
)

// Server runs the dispatch of one worker's queues: a loop per queue that
// records the worker's concurrency, takes the tasks it finished, grants
// waiting tasks while the queue has space, and repairs. Make one with
// Serve; Close stops it.
type Server struct {
	d       *Dispatcher
	member  string
	most    int
	observe func(QueueStats)
	handOff bool // Worker.HandOff
	// handOffWait is the longest Done waits (handOffWait; tests set it).
	handOffWait time.Duration
	loops       map[string]*loop
	cancel      context.CancelFunc
	wg          sync.WaitGroup
}

// finish is a task a worker finished.
type finish struct {
	id, tenant string
	ran        time.Duration
	done       bool
	hold       time.Duration // how long to hold its tenant's waiting tasks
	key        string        // a concurrency key to hold for keyHold
	keyHold    time.Duration
	// capped: its tenant has a cap, as the gate's cache had its quota
	// when the task finished. Its places are few: its finish goes in at
	// once, and with a hand-off its worker waits in Done.
	capped bool
	// keyed: the task carries concurrency keys and left asynq's hands,
	// freeing a place of each: its finish goes in at once too, for a
	// key's places are few as well.
	keyed bool
}

// urgent reports whether f goes in at once, rather than gather with
// others for the next turn: it frees a place of a capped tenant or of a
// key.
func (f finish) urgent() bool { return f.capped || f.keyed }

type loop struct {
	s     *Server
	queue string
	ch    chan finish
	// sent are the limits last handed in for the tenants the loop looks
	// after (paused ones and the next in line), updates those to hand in
	// with the next turn.
	sent, updates map[string]rule.Limits
	// keySent and keyUpdates are the same for the queue's concurrency
	// keys.
	keySent, keyUpdates map[string]rule.KeyLimits
	// resent is when the loop last forgot sent and keySent, to hand them
	// in again (resendEvery).
	resent time.Time
	// runCursor is where syncLimits's scan of the tasks in flight goes on.
	runCursor uint64
	// fleetRead is when the loop last read the queue's stats, ungated
	// whether servers without a gate served it then (logged once).
	fleetRead time.Time
	ungated   bool
	pace      pace
	// awaited are the finishes of capped tenants' tasks whose worker
	// waits in Done, by task ID (handOff). wake cuts short the pause
	// before a finish asynq had yet to mark done goes in again.
	awaited sync.Map // string → *handOff
	wake    chan struct{}
	// claimed are the tasks the hand-offs claimed and admit ahead, by ID,
	// upNext the entries next in capped tenants' lines (prepare, lineUp);
	// stopped is set once the loop forgets every claim (dropReady).
	claimMu sync.Mutex
	claimed map[string]*ahead
	upNext  map[string][]string
	stopped bool
	// backing are the tenants a grant of which went back to the head of
	// its line (its admission did not admit it), by the number of the
	// turn that takes it back (turns): until that turn is over, no task
	// of theirs is claimed, for it would start before the one going
	// back (heldBack).
	backing map[string]uint64
	turns   uint64
	// admitting are the tenants whose claims are being admitted, toAdmit
	// their claims that wait for the next call (admitAhead); granting
	// counts the tenants' grants the loop is admitting, and inTurn is set
	// while a turn is on its way: those calls wait for both (admitsCond).
	admitting  map[string]bool
	toAdmit    map[string][]claiming
	granting   map[string]int
	inTurn     bool
	admitsCond *sync.Cond
	// readyIn counts the tasks turns moved in as they granted them.
	readyIn atomic.Int64
	moves   moves
	granted time.Time // the loop's latest grant
	// running counts this worker's tasks of the queue being handled, by
	// tenant (Server.Started): syncLimits looks their quotas up too, for
	// a tenant at its cap is in no set it reads.
	running tally
}

// tally counts running tasks by tenant, for syncLimits.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

// add counts d more of tenant's tasks.
func (t *tally) add(tenant string, d int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	if t.n[tenant] += d; t.n[tenant] <= 0 {
		delete(t.n, tenant)
	}
}

// some returns up to most of the tenants counted.
func (t *tally) some(most int) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, min(most, len(t.n)))
	for T := range t.n {
		if len(out) == most {
			break
		}
		out = append(out, T)
	}
	return out
}

// moves tells workers whose queue was empty when the loop next moves tasks
// in (Server.AwaitMove).
type moves struct {
	mu  sync.Mutex
	n   uint64        // moves so far
	ch  chan struct{} // closed at the next move
	due bool          // the loop expects to move tasks in soon
}

// moved records a move, and whether the loop expects another soon.
func (m *moves) moved(due bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	if m.ch != nil {
		close(m.ch)
		m.ch = nil
	}
	m.due = due
}

// count is how many moves there were.
func (m *moves) count() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

// expect records whether the loop expects to move tasks in soon.
func (m *moves) expect(due bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.due = due
}

// since returns a channel closed at the next move, or nil when there was
// one after the n-th or none is expected.
func (m *moves) since(n uint64) (chan struct{}, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.n != n:
		return nil, true
	case !m.due:
		return nil, false
	case m.ch == nil:
		m.ch = make(chan struct{})
	}
	return m.ch, false
}

// Worker is what Serve needs to know of a worker.
type Worker struct {
	// Queues are the asynq queues it processes.
	Queues []string
	// Concurrency is how many tasks it runs at once; at least 1.
	Concurrency int
	// Fair makes its queues fair.
	Fair bool
	// Observe, when set, receives each queue's Stats every couple of
	// seconds. It must not block.
	Observe func(QueueStats)
	// RestartGrace is how long its queues stay dispatched after it leaves
	// or lapses, for producers to keep holding capped, paused and fair
	// tasks while it restarts: 0 means DefaultRestartGrace, a negative
	// value none.
	RestartGrace time.Duration
	// HandOff says that the worker calls Server.Done each time asynq has
	// marked one of its tasks done, before asynq frees the task's slot.
	HandOff bool
}

// Serve records w on its queues at once (so producers follow within a
// second), and starts a loop for each.
func (d *Dispatcher) Serve(w Worker) (*Server, error) {
	queues, concurrency, fair := w.Queues, w.Concurrency, w.Fair
	if err := d.checkPrefix(); err != nil {
		return nil, err
	}
	if concurrency < 1 {
		return nil, fmt.Errorf("dispatch: concurrency %d, want at least 1", concurrency)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	grace := w.RestartGrace
	switch {
	case grace == 0:
		grace = DefaultRestartGrace
	case grace < 0:
		grace = 0
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		d:           d,
		member:      workerMember{id: hex.EncodeToString(b[:]), concurrency: concurrency, fair: fair, grace: grace}.String(),
		most:        2 * concurrency,
		observe:     w.Observe,
		handOff:     w.HandOff,
		handOffWait: handOffWait,
		loops:       make(map[string]*loop, len(queues)),
		cancel:      cancel,
	}
	for _, q := range queues {
		l := &loop{s: s, queue: q, ch: make(chan finish, 4*concurrency), wake: make(chan struct{}, 1),
			sent: map[string]rule.Limits{}, updates: map[string]rule.Limits{},
			keySent: map[string]rule.KeyLimits{}, keyUpdates: map[string]rule.KeyLimits{}}
		cctx, ccancel := context.WithTimeout(ctx, callTimeout)
		_, err := l.turn(cctx, nil, nil, nil, heartbeat, 0)
		ccancel()
		if err != nil {
			cancel()
			s.leave()
			return nil, err
		}
		s.loops[q] = l
	}
	for _, l := range s.loops {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			l.run(ctx)
		}()
	}
	return s, nil
}

// Finished tells the dispatcher that the worker finished task id of
// tenant in queue after running it for ran; done is false when asynq will
// retry it (the task keeps its tenant's place). keys are the task's
// concurrency keys (enqueue.Keys): a finish that frees places of keys is
// handed in at once, as a capped tenant's is, rather than gathered with
// others for the next turn. The tenant's quota, as the gate reads it now,
// updates its cap and weight there. It may block briefly while the
// queue's loop catches up.
func (s *Server) Finished(queue, tenant, id string, ran time.Duration, done bool, keys ...string) {
	s.finished(finish{id: id, tenant: tenant, ran: ran, done: done, keyed: done && len(keys) > 0}, queue)
}

// Throttled tells the dispatcher that the worker's task id of tenant in
// queue, which ran for ran, was throttled downstream and will be retried:
// it keeps its place, and the tenant's waiting tasks are held for hold.
func (s *Server) Throttled(queue, tenant, id string, ran, hold time.Duration) {
	s.finished(finish{id: id, tenant: tenant, ran: ran, hold: hold}, queue)
}

// ThrottledKey tells the dispatcher that the worker's task id of tenant in
// queue, which ran for ran, was throttled downstream on concurrency key
// key and will be retried: it keeps its place, and every waiting task
// carrying key, whatever its tenant, is held for hold.
func (s *Server) ThrottledKey(queue, tenant, id, key string, ran, hold time.Duration) {
	s.finished(finish{id: id, tenant: tenant, ran: ran, keyHold: hold, key: key}, queue)
}

// Started tells the dispatcher that the worker began handling a task of
// tenant in queue; its Finished, Throttled or ThrottledKey ends it. While
// tenants have tasks running here, the queue's loop looks their quotas up
// with the paused ones and the next in line: a cap raised while a tenant
// sits at it takes effect within about a second, without waiting for one
// of its tasks to end.
func (s *Server) Started(queue, tenant string) {
	if l := s.loops[queue]; l != nil {
		l.running.add(tenant, 1)
	}
}

func (s *Server) finished(f finish, queue string) {
	l := s.loops[queue]
	if l == nil {
		return
	}
	l.running.add(f.tenant, -1)
	if f.id == "" {
		return
	}
	f = s.capping(f)
	if s.handOff && f.done && f.capped {
		h := &handOff{done: make(chan struct{}), tenant: f.tenant, ready: make(chan struct{})}
		l.awaited.Store(f.id, h)
		go l.prepare(h)
	}
	l.ch <- f
}

// capping returns f with capped set from its tenant's quota. It runs on
// the handler's goroutine, before asynq marks the task done: a quota the
// gate's cache does not have yet is not waited for long.
func (s *Server) capping(f finish) finish {
	ctx, cancel := context.WithTimeout(context.Background(), handOffWait)
	defer cancel()
	q, err := s.d.gate.Quota(ctx, f.tenant)
	f.capped = err == nil && q.MaxInFlight > 0
	return f
}

// waitFor waits for ch to close, at most d, and reports whether it did.
func waitFor(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// Done tells the dispatcher that asynq has just marked task id of queue
// done, before it frees the task's slot. When the task was a capped
// tenant's, handed to Finished as done, Done waits, at most 5 ms
// (handOffWait), until the dispatcher has handed its finish in and moved
// in that turn's grants of the tenant and those that go to the front,
// which it admits and moves before the turn's others. A capped tenant's
// next task goes in at the front of the queue (rule.Fronts), so the
// worker whose slot frees takes it, where it would otherwise take a task
// behind it and leave the tenant's place unused until another worker
// frees. Other tasks return at once. Done reports whether the wait ended
// with such grants moved in: the slot that frees is then for the task at
// the front. The worker package calls it from the Redis client it gives
// asynq.
func (s *Server) Done(queue, id string) bool {
	l := s.loops[queue]
	if l == nil {
		return false
	}
	v, ok := l.awaited.Load(id)
	if !ok {
		return false
	}
	h := v.(*handOff)
	h.marked.Store(true)
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return waitFor(h.done, s.handOffWait) && h.moved
}

// handOff is a worker's wait in Done for the finish of its capped
// tenant's task to be handed in.
type handOff struct {
	done  chan struct{} // closed when the wait ends
	moved bool          // set before done closes: the tenant's or front grants went in
	// tenant is the task's; marked is set when asynq has marked the task
	// done (Done); ready closes when prepare is over.
	tenant string
	marked atomic.Bool
	ready  chan struct{}
}

// ahead is a task a hand-off claimed (prepare): dec is its admission, nil
// while it is on its way.
type ahead struct {
	tenant string
	dec    *admission.Decision
}

// claiming is a claimed task that waits to be admitted, and the hand-off
// whose prepare is over once it is.
type claiming struct {
	id string
	h  *handOff
}

// prepareWait is the longest a turn that hands in a finish asynq has
// marked done waits for the admission prepare makes meanwhile.
const prepareWait = time.Millisecond

// prepareAhead is how far into its tenant's line prepare looks for a task
// that no other hand-off has claimed: the finishes of a cluster each
// admit their own.
const prepareAhead = 8

// prepare admits, while asynq marks the capped tenant's finished task
// done, the first task in the tenant's line that no other hand-off has
// claimed, so that the turn that grants it moves it in at once (readyFor):
// the hand-off then waits for one call, where it would wait for the turn,
// the admission and the move one after another. The entries come from the
// last turn that granted the tenant (lineUp), or a read of the line. A
// tenant's claims are admitted in the order claimed, those that come
// together in one call (admitAhead), so the tenant's log takes them in
// the order its line holds them. A task that waits to start later, or that
// the gate defers, is left to the turn's own admission.
func (l *loop) prepare(h *handOff) {
	ok, lead := l.claim(h, nil)
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		line, err := l.s.d.rdb.LRange(ctx, l.s.d.keysFor(l.queue).waitingKey(h.tenant), 0, prepareAhead-1).Result()
		cancel()
		if err == nil {
			ok, lead = l.claim(h, line)
		}
	}
	switch {
	case !ok:
		close(h.ready) // the turn admits
	case lead:
		l.admitAhead(h.tenant)
	}
}

// admitAhead admits tenant's claimed tasks, in the order claimed, a call
// for those claimed while the last was on its way, until none is left.
func (l *loop) admitAhead(tenant string) {
	for {
		l.claimMu.Lock()
		for (l.inTurn || l.granting[tenant] > 0) && !l.stopped {
			// A turn may be granting the tenant's tasks before these, or
			// the loop admitting those it granted: after them, so that
			// its log takes its tasks in the order they go in.
			l.admitsDone().Wait()
		}
		cs := l.toAdmit[tenant]
		delete(l.toAdmit, tenant)
		if _, ok := l.backing[tenant]; ok {
			// One of its grants goes back to the head of its line, ahead
			// of these: the turn admits them after it.
			for _, c := range cs {
				delete(l.claimed, c.id)
				close(c.h.ready)
			}
			cs = nil
		}
		if len(cs) == 0 {
			delete(l.admitting, tenant)
			l.claimMu.Unlock()
			return
		}
		l.claimMu.Unlock()
		ids := make([]string, len(cs))
		for i, c := range cs {
			ids[i] = c.id
		}
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		ds, err := l.s.d.gate.AdmitBatchAt(ctx, tenant, ids, time.Time{})
		cancel()
		if err == nil && len(ds) != len(ids) {
			err = fmt.Errorf("the gate returned %d decisions for %d tasks", len(ds), len(ids))
		}
		l.claimMu.Lock()
		for i, id := range ids {
			c := l.claimed[id]
			switch {
			case err != nil:
				delete(l.claimed, id)
				delete(l.upNext, tenant) // the next claim reads the line
			case ds[i].Outcome != admission.Admitted:
				delete(l.claimed, id)
				l.releaseDeferred(ds[i])
				// It waits at the head of its line still: the next claim
				// reads the line, rather than take the task after it.
				delete(l.upNext, tenant)
			case c == nil || l.stopped:
				// A turn granted it meanwhile, or none will use it now:
				// the slot stays with the task (see settleReady).
				delete(l.claimed, id)
			default:
				c.dec = &ds[i]
			}
		}
		l.claimMu.Unlock()
		for _, c := range cs {
			close(c.h.ready)
		}
	}
}

// claim claims for hand-off h the first task of line (waiting entries of
// h's tenant, in order; nil: those the last turn that granted the tenant
// said were next, lineUp) that no hand-off has claimed and that may start
// now, and queues it for admission (admitAhead), in the order claimed. It
// reports whether it claimed one, and whether the caller is to admit the
// tenant's claims: no one else is.
func (l *loop) claim(h *handOff, line []string) (ok, lead bool) {
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	T := h.tenant
	if _, ok := l.backing[T]; ok {
		return false, false // the turn admits them, in order
	}
	if line == nil {
		line = l.upNext[T]
	}
	for i, s := range line {
		e, err := parseWaitingEntry(s)
		if err != nil || e.notBefore > 0 {
			return false, false // the turn admits it at its time
		}
		if _, taken := l.claimed[e.id]; taken {
			continue
		}
		if l.upNext[T] != nil {
			l.upNext[T] = line[i+1:] // a later turn may grant it: once only
		}
		if l.claimed == nil {
			l.claimed, l.admitting, l.toAdmit = map[string]*ahead{}, map[string]bool{}, map[string][]claiming{}
		}
		l.claimed[e.id] = &ahead{tenant: T}
		l.toAdmit[T] = append(l.toAdmit[T], claiming{id: e.id, h: h})
		lead = !l.admitting[T]
		l.admitting[T] = true
		return true, lead
	}
	return false, false
}

// heldBack records the tenants of picks whose admission did not admit
// them (their ops, in picks' order, are opBack): until the next turn has
// put them back at the head of their lines, no hand-off claims a task of
// theirs, which would go in ahead of them, and the entries the turn
// listed next for them no longer are.
func (l *loop) heldBack(picks []pick, ops []moveOp) {
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	for i, o := range ops {
		if o.op != opBack {
			continue
		}
		if l.backing == nil {
			l.backing = map[string]uint64{}
		}
		l.backing[picks[i].tenant] = l.turns + 1
		delete(l.upNext, picks[i].tenant)
	}
}

// turned notes that turn number n is over: the grants it took back are
// at the head of their lines again.
func (l *loop) turned(n uint64) {
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	for T, at := range l.backing {
		if at <= n {
			delete(l.backing, T)
		}
	}
}

// lineUp records the entries next in the lines of the capped tenants a
// turn granted (turnResult.next), for claim, in the place of those an
// earlier turn gave.
func (l *loop) lineUp(picks []pick, next map[string][]string) {
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	for _, p := range picks {
		delete(l.upNext, p.tenant)
	}
	for T, line := range next {
		if l.upNext == nil {
			l.upNext = map[string][]string{}
		}
		l.upNext[T] = line
	}
}

// readyFor returns the IDs of the tasks the hand-offs admitted ahead. For
// each finish among fs that asynq has marked done, it first waits for its
// prepare, at most prepareWait: that turn hands the finish in.
func (l *loop) readyFor(fs []finish) []string {
	for _, f := range fs {
		if v, ok := l.awaited.Load(f.id); ok && v.(*handOff).marked.Load() {
			waitFor(v.(*handOff).ready, prepareWait)
		}
	}
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	var ids []string
	for id, c := range l.claimed {
		if c.dec != nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// settleReady takes out of picks those whose tasks the turn moved in or
// freed (pick.moved, pick.gone), and returns how many moved in, by
// tenant. It forgets the claims of every pick: the others are admitted as
// any grant, and find the slot admitted ahead for them
// (admission.Decision.Existing). A slot admitted ahead is never given
// back: it stays with its task, whose grant, now or later, finds it. So
// the tenant's rate may count a task a little before it goes in (until
// its window passes it, for a task deleted meanwhile), never after. It
// counts the others as being admitted (admitted uncounts them) and ends
// the turn for admitAhead (turning).
func (l *loop) settleReady(picks []pick) ([]pick, map[string]int) {
	var to map[string]int
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	picks = slices.DeleteFunc(picks, func(p pick) bool {
		delete(l.claimed, p.entry.id)
		switch {
		case p.moved:
			if to == nil {
				to = map[string]int{}
			}
			to[p.tenant]++
			l.readyIn.Add(1)
		case !p.gone:
			if l.granting == nil {
				l.granting = map[string]int{}
			}
			l.granting[p.tenant]++
			return false
		}
		return true
	})
	l.inTurn = false
	l.admitsDone().Broadcast()
	return picks, to
}

// admitted notes that the loop has admitted picks, which settleReady
// counted: the admissions made ahead of their tenants' next tasks may go.
func (l *loop) admitted(picks []pick) {
	if len(picks) == 0 {
		return
	}
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	for _, p := range picks {
		if l.granting[p.tenant]--; l.granting[p.tenant] <= 0 {
			delete(l.granting, p.tenant)
		}
	}
	l.admitsDone().Broadcast()
}

// turning records that a turn is on its way (on) or that its grants are
// counted (off), for admitAhead.
func (l *loop) turning(on bool) {
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	l.inTurn = on
	if !on {
		l.admitsDone().Broadcast()
	}
}

// admitsDone returns the condition that admitAhead waits on, with claimMu
// held.
func (l *loop) admitsDone() *sync.Cond {
	if l.admitsCond == nil {
		l.admitsCond = sync.NewCond(&l.claimMu)
	}
	return l.admitsCond
}

// movedFor takes out of waiting, and returns, a wait for each task the
// turn moved in (moved, by tenant) of its tenant.
func movedFor(waiting map[string]*handOff, moved map[string]int) map[string]*handOff {
	var out map[string]*handOff
	for id, h := range waiting {
		if moved[h.tenant] > 0 {
			moved[h.tenant]--
			if out == nil {
				out = map[string]*handOff{}
			}
			out[id] = h
			delete(waiting, id)
		}
	}
	return out
}

// dropReady forgets the claims of tenants with no hand-off left, and all
// of them when every is set (the loop stops): no turn is to move them in
// at once, and their slots stay with their tasks (settleReady).
func (l *loop) dropReady(every bool) {
	waiting := map[string]bool{}
	l.awaited.Range(func(_, v any) bool {
		waiting[v.(*handOff).tenant] = true
		return true
	})
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	l.stopped = l.stopped || every
	if every {
		l.admitsDone().Broadcast()
	}
	for id, c := range l.claimed {
		if c.dec != nil && (every || !waiting[c.tenant]) {
			delete(l.claimed, id)
		}
	}
}

// releaseDeferred gives back, in the background, the slot an admission
// made ahead reserved for later: no task starts in it (the turn admits
// the task again at its grant).
func (l *loop) releaseDeferred(dec admission.Decision) {
	if dec.Existing || dec.Outcome != admission.Deferred {
		return // the task's own slot from before, or none
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if err := l.s.d.gate.Release(ctx, dec); err != nil {
			l.s.d.log.Warn("admitq: giving back a deferred admission failed", "queue", l.queue, "tenant", dec.Tenant, "task_id", dec.ID, "err", err)
		}
	}()
}

// Moves returns how many times the dispatcher has moved tasks into
// queue's pending list, for AwaitMove.
func (s *Server) Moves(queue string) uint64 {
	l := s.loops[queue]
	if l == nil {
		return 0
	}
	return l.moves.count()
}

// AwaitMove waits, at most wait, until the dispatcher has moved tasks into
// queue's pending list after the n-th time (Moves), when it expects to
// move some in soon: tenants have tasks waiting, granted tasks are on
// their way, or it granted some within the last second (a capped tenant
// at its cap is granted its next task when one of its tasks ends). It
// reports whether a look again is worth it: tasks were moved in after the
// n-th time, or it waited. A worker whose look into the queue found it
// empty calls it, through the Redis client it gives asynq, and looks
// again when it reports true. So the worker takes the task the dispatcher
// moved in (or a producer wrote meanwhile), where asynq would have slept
// its TaskCheckInterval first.
func (s *Server) AwaitMove(queue string, n uint64, wait time.Duration) bool {
	l := s.loops[queue]
	if l == nil || wait <= 0 {
		return false
	}
	ch, moved := l.moves.since(n)
	if ch == nil {
		return moved
	}
	waitFor(ch, wait)
	return true
}

// handedOff returns the awaited finishes among handed, which a turn
// handed in (later: those it gave back), by task ID, and their tenants.
// They stay awaited until let go, so that a Done that comes meanwhile
// waits for the move.
func (l *loop) handedOff(handed, later []finish) (map[string]*handOff, map[string]bool) {
	var out map[string]*handOff
	var tenants map[string]bool
	for _, f := range handed {
		if slices.ContainsFunc(later, func(g finish) bool { return g.id == f.id }) {
			continue
		}
		if v, ok := l.awaited.Load(f.id); ok {
			if out == nil {
				out, tenants = map[string]*handOff{}, map[string]bool{}
			}
			out[f.id] = v.(*handOff)
			tenants[f.tenant] = true
		}
	}
	return out, tenants
}

// letGo ends the waits of the finishes handedOff returned; moved says
// their tenants' or front grants went in.
func (l *loop) letGo(waiting map[string]*handOff, moved bool) {
	for id, h := range waiting {
		l.awaited.CompareAndDelete(id, h)
		h.moved = moved
		close(h.done)
	}
}

// release lets every worker waiting in Done or AwaitMove go: the loop
// stops.
func (l *loop) release() {
	l.moves.moved(false)
	l.awaited.Range(func(id, v any) bool {
		l.awaited.Delete(id)
		close(v.(*handOff).done)
		return true
	})
	l.dropReady(true)
}

// Close stops the loops, hands in the finishes they hold and takes the
// worker's record off its queues. Call it after the worker's handlers have
// returned.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
	s.leave()
}

// leave takes the worker off its queues, with what its loops still hold.
func (s *Server) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	for _, l := range s.loops {
		if _, err := l.turn(ctx, l.drain(nil), nil, nil, 0, 0); err != nil {
			s.d.log.Warn("admitq: leaving a dispatched queue failed; the worker's record lapses on its own", "queue", l.queue, "err", err)
		}
	}
}

func (l *loop) drain(fs []finish) []finish {
	for {
		select {
		case f := <-l.ch:
			fs = append(fs, f)
			l.pace.got++
		default:
			return fs
		}
	}
}

// run is the queue's loop. A turn hands in the finishes and the moves of
// the last turn's grants, and grants more; the grants are admitted at once
// and moved in by the next turn, which follows without a pause unless
// asynq's pending list holds enough to keep the workers busy meanwhile:
// then finishes gather for gatherFor to gatherMost (gather), so that one
// turn hands in several. Finishes that asynq has yet to mark done are
// handed in again after a pause that doubles from firstRetry to a second,
// so an outage never makes a busy loop.
func (l *loop) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	var fs []finish
	var ops []moveOp   // the last grants' moves, for the next turn
	var calm time.Time // until then, finishes gather for the next turn
	gathering := false // the timer is set for calm
	repair := time.Now().Add(repairEvery)
	sync := time.Now()
	retry := firstRetry
	defer l.release()
	for {
		select {
		case <-ctx.Done():
			l.putBack(fs)
			if err := l.s.d.move(context.WithoutCancel(ctx), l.queue, ops); err != nil {
				l.s.d.log.Warn("admitq: moving granted tasks failed; a repair pass will", "queue", l.queue, "err", err)
			}
			return
		case f := <-l.ch:
			fs = append(fs, f)
			l.pace.got++
			if wait := time.Until(calm); wait > 0 && len(fs) < l.s.most && !f.urgent() {
				if !gathering {
					t.Reset(wait) // the turn comes when the gathering ends
					gathering = true
				}
				continue
			}
		case <-t.C:
		case <-l.wake:
		}
		fs = l.drain(fs)
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		if time.Now().After(sync) {
			if err := l.syncLimits(cctx); err != nil && ctx.Err() == nil {
				l.s.d.log.Warn("admitq: reading paused tenants failed", "queue", l.queue, "err", err)
			}
			sync = time.Now().Add(syncEvery)
		}
		handed := len(fs)
		began := time.Now()
		l.pace.turned(began)
		moving := len(ops) > 0 // the turn moves them in
		ready := l.readyFor(fs)
		l.turning(true)
		l.claimMu.Lock()
		l.turns++
		n := l.turns
		l.claimMu.Unlock()
		tr, err := l.turn(cctx, fs, ops, ready, heartbeat, l.s.most)
		if err == nil {
			l.turned(n) // it put back what the admissions before it held back
		}
		movedIn := err == nil && moving
		if err != nil {
			l.turning(false)
		}
		if err == nil {
			granted := tr.picks
			var movedTo map[string]int
			tr.picks, movedTo = l.settleReady(tr.picks) // the turn is over for admitAhead
			l.lineUp(granted, tr.next)
			movedNow := len(movedTo) > 0
			movedIn = movedIn || movedNow
			if len(tr.later) < handed {
				retry = firstRetry // asynq marked some done: no outage
			}
			waiting, tenants := l.handedOff(fs, tr.later)
			fs = tr.later
			picks := tr.picks
			ops = nil // this turn moved them in
			if len(waiting) > 0 {
				// The workers waiting in Done take their tenants' next
				// tasks, and the grants that go to the front: those the
				// turn moved in go at once; the others are admitted and
				// moved in first, alone.
				l.letGo(movedFor(waiting, movedTo), true)
				var first []pick
				first, picks = splitFirst(picks, tenants)
				goes := false
				if ops = l.s.d.admit(cctx, l.queue, first); len(ops) > 0 {
					l.heldBack(first, ops)
					goes = slices.ContainsFunc(ops, func(o moveOp) bool { return o.op != opBack })
					ops = l.moveNow(cctx, ops)
					movedIn = movedIn || len(ops) == 0
				}
				l.letGo(waiting, movedNow || goes && len(ops) == 0)
				l.dropReady(false)
			}
			later := l.s.d.admit(cctx, l.queue, picks)
			l.heldBack(picks, later)
			ops = append(ops, later...)
			l.admitted(tr.picks)
			if len(tr.picks) > 0 {
				l.granted = time.Now()
			}
			if due := tr.waiting > 0 || len(ops) > 0 || time.Since(l.granted) < time.Second; movedIn {
				l.moves.moved(due)
			} else {
				l.moves.expect(due)
			}
			l.pace.turnEnded(began, movedIn, len(ops) > 0)
		} else if ctx.Err() == nil {
			// The ops are kept for the next turn; their grants wait in
			// state g, where a repair pass would find them.
			l.s.d.log.Warn("admitq: dispatch turn failed", "queue", l.queue, "err", err)
		}
		if time.Now().After(repair) {
			l.dropReady(false) // what a prepare finished after the last hand-off admitted
			l.repair(cctx)
			repair = time.Now().Add(repairEvery)
		}
		cancel()
		next := idleTick
		switch {
		case len(ops) > 0, err == nil && len(tr.picks) >= l.s.most:
			next = 0 // move them in, or grant more
		case len(fs) > 0:
			next, retry = retry, min(2*retry, time.Second) // asynq is marking them done
		case err != nil:
			next = busyTick
		case tr.waiting > 0:
			next = busyTick
		}
		calm, gathering = time.Time{}, false
		if g := l.gatherAfter(tr, err == nil, ops, fs); g > 0 {
			calm, gathering = time.Now().Add(g), next <= g
			next = max(next, g)
		}
		if err == nil && !tr.due.IsZero() {
			next = min(next, max(time.Until(tr.due), time.Millisecond))
		}
		t.Reset(next)
	}
}

// moveNow moves ops in at once, for a worker that waits in Done, rather
// than with the next turn; it returns the ops still to move (all of them,
// should the move fail).
func (l *loop) moveNow(ctx context.Context, ops []moveOp) []moveOp {
	if err := l.s.d.move(ctx, l.queue, ops); err != nil {
		if ctx.Err() == nil {
			l.s.d.log.Warn("admitq: moving granted tasks failed; the next turn will", "queue", l.queue, "err", err)
		}
		return ops
	}
	return nil
}

// splitFirst splits picks into those that go to the queue's front or are
// of tenants, and the rest, each in the order picked.
func splitFirst(picks []pick, tenants map[string]bool) (first, rest []pick) {
	for _, p := range picks {
		if p.front || tenants[p.tenant] {
			first = append(first, p)
		} else {
			rest = append(rest, p)
		}
	}
	return first, rest
}

// fronts reports whether any of ops goes to the queue's front: those are
// moved in at once.
func fronts(ops []moveOp) bool {
	return slices.ContainsFunc(ops, func(o moveOp) bool { return o.op == opFront })
}

// pace is the rate at which a loop's worker finishes tasks, and how long
// the loop takes to refill the queue: from the start of a turn that grants
// tasks to the end of the call that moves them in (the next turn, most
// often, after the admissions).
type pace struct {
	got    int       // finishes received since the last turn
	last   time.Time // the last turn
	rate   float64   // finishes a second, a moving mean over about rateFor
	refill float64   // seconds, a moving mean of the last eight or so
	// peak is the highest rate of late, fading over peakFades seconds: a
	// pool stalled on an empty pending list (asynq's workers sleep their
	// TaskCheckInterval then) finishes slowly, and must not seem to be.
	peak float64
	// granted is when the turn whose grants wait to be moved in began
	// (zero: none wait).
	granted time.Time
	// heard is when the last turn that handed in finishes began (zero:
	// none yet).
	heard time.Time
}

const peakFades = 10

// rateFor is about how far back the rate looks: its moving mean weighs
// each turn's finishes by the time since the last turn, so that it follows
// a pool that starts to drain within a few of these, however long the
// loop lets finishes gather meanwhile (a mean by turns, an eighth a turn,
// took some 100 ms of 4 ms gatherings to follow 16 workers from holding
// their tasks to draining 2 ms ones, and they found the queue empty every
// 5 ms meanwhile).
const rateFor = 10 * time.Millisecond

// quietFor is the longest spell without finishes that the rate spans.
// After a longer one the pool was idle, or its workers held their tasks,
// and the finishes that end it came over a time no turn saw: a pool of 16
// held for 300 ms read 46 tasks a second from them, gathered 4 ms a turn
// on a pending list of two, and started 2 ms tasks at half its speed for
// its first 60 ms. They start the rate afresh instead: the next turn
// measures it, and the loop does not gather meanwhile. A stall, the
// workers asleep on an empty pending list for about their
// TaskCheckInterval (10 ms), is shorter, and keeps the peak.
const quietFor = 4 * rateFor

// turned takes the finishes received since the last turn into the rate.
func (p *pace) turned(now time.Time) {
	if p.got > 0 {
		quiet := p.heard.IsZero() || now.Sub(p.heard) > quietFor
		p.heard = now
		if quiet {
			p.rate, p.peak = 0, 0
			p.got, p.last = 0, now
			return
		}
	}
	if dt := now.Sub(p.last).Seconds(); !p.last.IsZero() && dt > 0 {
		inst := float64(p.got) / dt
		if p.rate == 0 {
			p.rate = inst // a mean from zero would climb slowly from a start
		} else {
			p.rate += (inst - p.rate) * (1 - math.Exp(-dt/rateFor.Seconds()))
		}
		p.peak = max(p.rate, p.peak*(1-min(dt/peakFades, 1)))
	}
	p.got, p.last = 0, now
}

// turnEnded takes a successful turn that began at began into the refill
// time: when it moved in earlier grants, the time since the turn that
// granted them began; when it leaves grants to move in, it notes its own
// start for them.
func (p *pace) turnEnded(began time.Time, movedIn, waiting bool) {
	if movedIn && !p.granted.IsZero() {
		p.refill += (time.Since(p.granted).Seconds() - p.refill) / 8
		p.granted = time.Time{}
	}
	if waiting && p.granted.IsZero() {
		p.granted = began
	}
}

// gatherAfter is how long the loop lets finishes gather after a turn (ok:
// it succeeded) that found tr, left ops to move and fs to hand in again:
// gather's time, but none when a grant goes to the front or the finish of
// a capped tenant's task or a keyed one waits to be handed in again, for
// those go at once.
func (l *loop) gatherAfter(tr turnResult, ok bool, ops []moveOp, fs []finish) time.Duration {
	if fronts(ops) || slices.ContainsFunc(fs, finish.urgent) {
		return 0
	}
	return l.gather(tr, ok)
}

// gather is how long the loop lets finishes gather after a turn (ok: it
// succeeded) that found tr: the longest g up to gatherMost such that
// asynq's pending list keeps the queue's live workers busy, at this
// worker's peak rate, for gatherSpare times g and a refill (pace); none
// when that is under gatherFor. So the workers do not
// find the list empty for a gathering, and the longer tasks take, the
// more finishes a turn hands in.
func (l *loop) gather(tr turnResult, ok bool) time.Duration {
	if !ok || tr.queued == 0 || l.pace.peak <= 0 {
		return 0
	}
	own := l.s.most / 2
	rate := l.pace.peak * float64(max(tr.live, own)) / float64(own)
	g := float64(tr.queued)/rate/gatherSpare - l.pace.refill // seconds
	if g < gatherFor.Seconds() {
		return 0
	}
	return time.Duration(min(g, gatherMost.Seconds()) * float64(time.Second))
}

// syncLimits looks up the quotas of the queue's paused tenants, of the
// next SyncTenants in line, of the tenants with tasks in flight (those
// this worker runs, and a step of a scan of all), of its paused keys and
// of up to SyncTenants of its other concurrency keys, and queues for the
// next turn the limits that changed since they
// were last handed in: a pause or a resume reaches the queue within about
// syncEvery, without a finish or a new task of the tenant or key. Every
// resendEvery it hands them in whether they changed or not, over any
// stale limits written back since.
func (l *loop) syncLimits(ctx context.Context) error {
	if time.Since(l.resent) >= resendEvery {
		clear(l.sent)
		clear(l.keySent)
		l.resent = time.Now()
	}
	k := l.s.d.keysFor(l.queue)
	var held, next, keys, heldKeys, waitedOn *redis.StringSliceCmd
	var inRun *redis.ScanCmd
	_, err := l.s.d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		held = p.SRandMemberN(ctx, k.held, syncTenants)
		next = p.ZRange(ctx, k.vt, 0, syncTenants-1)
		heldKeys = p.SRandMemberN(ctx, k.kheld, syncTenants)
		waitedOn = p.ZRange(ctx, k.kw, 0, syncTenants-1)
		keys = p.SRandMemberN(ctx, k.keys, syncTenants)
		inRun = p.HScan(ctx, k.run, l.runCursor, "", syncTenants)
		return nil
	})
	if err != nil {
		return l.s.d.recoverFrom(err)
	}
	// The tenants with tasks in flight, a step of a scan of them at a
	// time: one at its cap is in none of the other sets, whatever holds
	// its places (tasks pending, running elsewhere, or to be retried).
	entries, cursor := inRun.Val()
	l.runCursor = cursor
	inFlight := runTenants(l.running.some(syncTenants), entries)
	seen := make(map[string]bool, len(l.sent))
	for _, T := range slices.Concat(held.Val(), next.Val(), inFlight) {
		if seen[T] {
			continue
		}
		seen[T] = true
		q, err := l.s.d.gate.Quota(ctx, T)
		if err != nil {
			continue // no quota now: the tenant keeps what it has
		}
		if lim, ok := l.sent[T]; !ok || lim != limitsOf(q) {
			l.updates[T] = limitsOf(q)
		}
	}
	// sent keeps the tenants seen since the last resend (the scan of the
	// tasks in flight sees each in its turn), which clears it.
	clear(seen)
	for _, K := range slices.Concat(heldKeys.Val(), waitedOn.Val(), keys.Val()) {
		if seen[K] {
			continue
		}
		seen[K] = true
		lim, err := l.s.d.keyLimits(ctx, K)
		if err != nil {
			continue // no quota now: the key keeps what it has
		}
		if sent, ok := l.keySent[K]; !ok || sent != lim {
			l.keyUpdates[K] = lim
		}
	}
	for K := range l.keySent {
		if !seen[K] {
			delete(l.keySent, K)
		}
	}
	return nil
}

// repair runs a repair pass over the queue, and reports its stats when the
// worker asked for them.
func (l *loop) repair(ctx context.Context) {
	if err := errors.Join(l.s.d.repairAll(ctx, l.queue), l.s.d.adopt(ctx, l.queue)); err != nil && ctx.Err() == nil {
		l.s.d.log.Warn("admitq: dispatch repair pass failed", "queue", l.queue, "err", err)
	}
	if l.s.observe == nil && time.Now().Before(l.fleetRead.Add(fleetEvery)) {
		return
	}
	qs, err := l.s.d.Stats(ctx, l.queue)
	if err != nil {
		return
	}
	l.fleetRead = time.Now()
	if qs.Fair && qs.Ungated > 0 && !l.ungated {
		l.s.d.log.Warn("admitq: asynq servers without a gate process this fair queue: they take its tasks out of turn and add no room to it; run every worker of the queue with worker.Config{Gate: g, Fair: true}",
			"queue", l.queue, "servers_without_gate", qs.Ungated, "gate_workers", qs.Workers)
	}
	l.ungated = qs.Ungated > 0
	if l.s.observe != nil {
		l.s.observe(qs)
	}
}

// putBack returns finishes a stopping loop holds to its channel, for
// leave to hand in.
func (l *loop) putBack(fs []finish) {
	for _, f := range fs {
		select {
		case l.ch <- f:
		default:
		}
	}
}

// pick is a task granted to this worker to admit and move; front: it
// goes in at the front of the queue (rule.Fronts), right behind task after
// if that is still pending (its tenant's previous one).
type pick struct {
	tenant string
	entry  waitingEntry
	front  bool
	after  string
	// moved: the turn moved it in already (it was admitted before, see
	// loop.prepare); gone: asynq no longer keeps it parked.
	moved, gone bool
}

// turnResult is what a dispatch turn answered.
type turnResult struct {
	picks   []pick
	waiting int       // tenants with tasks waiting
	queued  int       // tasks in asynq's pending list
	live    int       // the live gate workers' concurrency (0: not read)
	due     time.Time // when a sleeping tenant wakes or limbo is due (zero: none)
	later   []finish  // finishes to hand in again
	// next are the waiting entries next in the lines of the capped tenants
	// it granted, in order, by tenant (for prepare).
	next map[string][]string
}

// readNext reads the count u and then u pairs tenant, waiting entry at
// the start of rest, and returns them by tenant, in order, and what
// follows.
func readNext(rest []any) (map[string][]string, []any, error) {
	u, err := toInt(rest[0])
	if err != nil {
		return nil, nil, err
	}
	if u < 0 || len(rest) < 1+2*int(u) {
		return nil, nil, fmt.Errorf("dispatch: fair_dispatch.lua returned %d values for %d next entries", len(rest)-1, u)
	}
	var out map[string][]string
	for v := range slices.Chunk(rest[1:1+2*u], 2) {
		t, err := toStr(v[0])
		if err != nil {
			return nil, nil, err
		}
		e, err := toStr(v[1])
		if err != nil {
			return nil, nil, err
		}
		if out == nil {
			out = map[string][]string{}
		}
		out[t] = append(out[t], e)
	}
	return out, rest[1+2*u:], nil
}

// turn runs fair_dispatch.lua: heartbeat (ttl 0 leaves), finishes, the
// moves ops (admit's), and up to most grants.
func (l *loop) turn(ctx context.Context, fs []finish, ops []moveOp, ready []string, ttl time.Duration, most int) (turnResult, error) {
	args := make([]any, 0, 5+8*len(fs)+1+3*len(ops)+1+4*len(l.updates)+1+3*len(l.keyUpdates)+1+len(ready))
	args = append(args, l.s.member, ttl.Microseconds(), most, len(fs))
	for _, f := range fs {
		lim := rule.Limits{Cap: -1, Weight: rule.WeightScale}
		if q, err := l.s.d.gate.Quota(ctx, f.tenant); err == nil {
			lim = limitsOf(q)
		}
		hold := f.hold
		if f.key != "" {
			hold = f.keyHold
		}
		args = append(args, f.id, f.ran.Microseconds(), flag(f.done), lim.Cap, lim.Weight, flag(lim.Paused), max(hold.Microseconds(), 0), f.key)
	}
	args = appendOps(args, ops)
	args = append(args, len(l.updates))
	for T, lim := range l.updates {
		args = append(args, T, lim.Cap, lim.Weight, flag(lim.Paused))
	}
	args = append(args, len(l.keyUpdates))
	for K, lim := range l.keyUpdates {
		args = append(args, K, lim.Cap, flag(lim.Paused))
	}
	args = append(args, len(ready))
	for _, id := range ready {
		args = append(args, id)
	}
	res, err := l.s.d.run(ctx, l.s.d.scripts.dispatch, l.queue, args...)
	if err != nil {
		return turnResult{}, err
	}
	for T, lim := range l.updates {
		l.sent[T] = lim
	}
	clear(l.updates)
	for K, lim := range l.keyUpdates {
		l.keySent[K] = lim
	}
	clear(l.keyUpdates)
	picks, rest, err := readPicks(res)
	if err == nil && len(rest) < 5 {
		err = fmt.Errorf("dispatch: fair_dispatch.lua returned %d values", len(res))
	}
	if err != nil {
		return turnResult{}, err
	}
	tr := turnResult{picks: picks}
	waiting, err1 := toInt(rest[0])
	due, err2 := toInt(rest[1])
	queued, err3 := toInt(rest[2])
	live, err4 := toInt(rest[3])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return turnResult{}, err
	}
	tr.waiting, tr.queued, tr.live = int(waiting), int(queued), int(live)
	if due > 0 {
		tr.due = time.UnixMicro(due)
	}
	if tr.next, rest, err = readNext(rest[4:]); err != nil {
		return turnResult{}, err
	}
	for _, v := range rest {
		i, err := toInt(v)
		if err != nil {
			return turnResult{}, err
		}
		if i >= 1 && int(i) <= len(fs) {
			tr.later = append(tr.later, fs[i-1])
		}
	}
	return tr, nil
}

// readPicks reads "n, then n quads tenant, entry, front, after" from the
// head of res.
func readPicks(res []any) ([]pick, []any, error) {
	if len(res) < 1 {
		return nil, nil, errors.New("dispatch: empty reply")
	}
	n, err := toInt(res[0])
	if err != nil {
		return nil, nil, err
	}
	if n < 0 || len(res) < 1+4*int(n) {
		return nil, nil, fmt.Errorf("dispatch: reply of %d values for %d grants", len(res), n)
	}
	picks := make([]pick, n)
	for i, v := range slices.Collect(slices.Chunk(res[1:1+4*n], 4)) {
		var f [4]string
		for j := range f {
			if f[j], err = toStr(v[j]); err != nil {
				return nil, nil, err
			}
		}
		t, front, after := f[0], f[2], f[3]
		e, err := parseWaitingEntry(f[1])
		if err != nil {
			return nil, nil, err
		}
		picks[i] = pick{tenant: t, entry: e, front: front == "1", after: after, moved: front == "m", gone: front == "x"}
	}
	return picks, res[1+4*n:], nil
}

// A moveOp is what becomes of a granted task (fair_move.lua's ops).
type moveOp struct {
	op string // opGo, opFront, opBack, opFree or opDrop
	id string
	// sleep is how long the tenant is held back (opBack).
	sleep time.Duration
	// uniqueTTL is the task's asynq.Unique TTL, which its lock gets when
	// it goes in (opGo, opFront).
	uniqueTTL time.Duration
	// after is the task to go right behind if it is still pending
	// (opFront; "": none).
	after string
	// tenant, flow and entry name a waiting entry to drop (opDrop).
	tenant, flow, entry string
}

// fair.lua's move ops.
const (
	opGo    = "go"    // into asynq's pending list now, behind the tasks there
	opFront = "front" // as opGo, at the end asynq takes from
	opBack  = "back"  // back to the head of its tenant's line
	opFree  = "free"  // out of run
	opDrop  = "drop"  // a waiting entry out of its line
)

// appendOps appends ops to args as fair.lua's moveOps reads them: n, then
// n triples op, task ID, and the sleep µs (opBack) or the unique TTL ms
// (opGo, opFront), each opFront's followed by the task to go behind.
func appendOps(args []any, ops []moveOp) []any {
	args = append(args, len(ops))
	for _, o := range ops {
		n := o.sleep.Microseconds()
		if o.op == opGo || o.op == opFront {
			n = o.uniqueTTL.Milliseconds()
		}
		id := o.id
		if o.op == opDrop {
			id = o.tenant + "\n" + o.flow + "\n" + o.entry
		}
		args = append(args, o.op, id, max(n, 0))
		if o.op == opFront {
			args = append(args, o.after)
		}
	}
	return args
}

// admitAndMove admits each granted task through the gate, at its own
// not-before time, then moves them all in one fair_move.lua call (the
// queue's loop moves them with its next turn instead): in now when
// admitted now, else back at the head of their tenant's line, which
// sleeps until the gate's slot. So a waiting task is charged the moment it
// goes in, and the rate holds for start times. A tenant's grants are
// admitted in one batch, in order, and all the tenants' batches together
// (Gate.AdmitBatches): one script call a Redis server.
func (d *Dispatcher) admitAndMove(ctx context.Context, queue string, picks []pick) error {
	return d.move(ctx, queue, d.admit(ctx, queue, picks))
}

// admit admits picks through the gate and returns their move ops, for
// fair_move.lua or the next dispatch turn. Each run of one tenant's picks
// is a batch of its own, and the gate asks Redis for them all together.
func (d *Dispatcher) admit(ctx context.Context, queue string, picks []pick) []moveOp {
	if len(picks) == 0 {
		return nil
	}
	ops := make([]moveOp, len(picks))
	rs := runs(picks)
	batches := make([]admission.Batch, len(rs))
	for i, run := range rs {
		b := &batches[i]
		b.Tenant, b.NotBefore = picks[run[0]].tenant, picks[run[0]].entry.notBeforeTime()
		for _, p := range picks[run[0]:run[1]] {
			b.IDs = append(b.IDs, p.entry.id)
		}
	}
	for i, res := range d.gate.AdmitBatches(ctx, batches) {
		d.opsFor(ctx, queue, picks[rs[i][0]:rs[i][1]], ops[rs[i][0]:rs[i][1]], res.Decisions, res.Err)
	}
	return ops
}

// move runs fair_move.lua with ops.
func (d *Dispatcher) move(ctx context.Context, queue string, ops []moveOp) error {
	if len(ops) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := d.run(ctx, d.scripts.move, queue, appendOps(nil, ops)...)
	return err
}

// runs splits picks into runs of one tenant with one not-before time, of
// at most admission.MaxBatch picks: each is [lo, hi) of picks.
func runs(picks []pick) [][2]int {
	var out [][2]int
	for lo := 0; lo < len(picks); {
		hi := lo + 1
		for hi < len(picks) && hi-lo < admission.MaxBatch && picks[hi].tenant == picks[lo].tenant && picks[hi].entry.notBefore == picks[lo].entry.notBefore {
			hi++
		}
		out = append(out, [2]int{lo, hi})
		lo = hi
	}
	return out
}

// opsFor writes into ops the move op of each of picks, one tenant's with
// one not-before time, by the gate's decisions ds for them (or its error).
func (d *Dispatcher) opsFor(ctx context.Context, queue string, picks []pick, ops []moveOp, ds []admission.Decision, err error) {
	tenant := picks[0].tenant
	ids := make([]string, len(picks))
	for i, p := range picks {
		ids[i] = p.entry.id
		ops[i] = moveOp{op: opBack, id: p.entry.id, sleep: time.Second}
	}
	if err == nil && len(ds) != len(ids) {
		err = fmt.Errorf("the gate returned %d decisions for %d tasks", len(ds), len(ids))
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			d.log.Warn("admitq: admitting waiting tasks failed; they keep their places", "queue", queue, "tenant", tenant, "err", err)
		}
		return
	}
	var held *moveOp // the run's first task that goes back
	for i, dec := range ds {
		if held != nil && dec.Outcome == admission.Admitted {
			// A task of the run before it goes back to the head of the
			// tenant's line: this one goes back behind it, so that the
			// tenant's tasks start in order. A slot admitted ahead
			// (Existing) stays with its task; a new one is given back.
			if !dec.Existing {
				if err := d.gate.Release(ctx, dec); err != nil {
					d.log.Warn("admitq: giving back a waiting task's slot failed", "queue", queue, "tenant", tenant, "task_id", dec.ID, "err", err)
				}
			}
			ops[i].sleep = held.sleep
			continue
		}
		switch dec.Outcome {
		case admission.Admitted:
			op := opGo
			if picks[i].front {
				op = opFront
			}
			ops[i] = moveOp{op: op, id: ids[i], uniqueTTL: time.Duration(picks[i].entry.uniqueTTL) * time.Millisecond, after: picks[i].after}
		case admission.Deferred:
			// Not now: give the reserved slot back and wait for it, so
			// that the task is charged when it goes in, and goes in when
			// it is charged (asynq's scheduled set would start it up to a
			// poll late, beside the next second's tasks).
			if err := d.gate.Release(ctx, dec); err != nil {
				d.log.Warn("admitq: giving back a waiting task's future slot failed", "queue", queue, "tenant", tenant, "task_id", dec.ID, "err", err)
			}
			ops[i].sleep = max(dec.Delay(), time.Millisecond)
			held = &ops[i]
		default:
			ops[i].sleep = max(dec.Delay(), time.Millisecond)
			held = &ops[i]
		}
	}
}

// repairAll runs fair_repair.lua over the whole of queue's run hash, page
// by page, and finishes the grants whose mover is gone.
func (d *Dispatcher) repairAll(ctx context.Context, queue string) error {
	cursor := "0"
	for range 1000 {
		res, err := d.run(ctx, d.scripts.repair, queue, cursor, Grace.Microseconds())
		if err != nil {
			return err
		}
		if len(res) < 2 {
			return fmt.Errorf("dispatch: fair_repair.lua returned %d values", len(res))
		}
		if cursor, err = toStr(res[0]); err != nil {
			return err
		}
		picks, _, err := readPicks(res[1:])
		if err != nil {
			return err
		}
		if err := d.admitAndMove(ctx, queue, picks); err != nil {
			return err
		}
		if cursor == "0" || cursor == "" {
			return nil
		}
	}
	return nil
}
