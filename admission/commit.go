package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// committer group-commits admission requests. A request joins the queue
// of the Redis server that serves its key (a lane: the one server's, or on
// a cluster its master's); while fewer than maxFlight of the lane's
// pipelines are in flight, the request starts one, which takes everything
// waiting in the lane (up to maxBatch requests) and sends it as a single
// Redis pipeline. Under load each pipeline carries many requests; at low
// load a request goes out at once, alone. No timer ever waits for company.
// A pipeline still unanswered at the timeout stops counting as in flight
// (see flushLoop), and each pipeline tells the gate's breaker how it went
// (report). A master that is slow or down holds up only its own lane.
//
// Within a pipeline one script call decides all of a tenant's waiting
// requests, and one call of admit.lua (or counter.lua, for Counter mode)
// decides the whole batch across tenants: on a plain client (one Redis
// server) with every key declared; on a cluster, where a script's declared
// keys must share a hash slot, with the first declared and every key named
// in ARGV (queue).
type committer struct {
	rdb       redis.UniversalClient
	admit     *redis.Script
	counter   *redis.Script
	crossKey  bool
	perNode   bool // a cluster: a lane per master
	maxBatch  int
	maxFlight int
	timeout   time.Duration
	// report, when set, hears how each pipeline went: nil when Redis
	// answered (even with script errors), else the error that shows it is
	// unavailable. key is one of the pipeline's keys, started when it was
	// sent.
	report func(key string, started time.Time, err error)

	timers sync.Pool // *time.Timer, stopped: one per waiting caller

	mu    sync.Mutex
	one   *lane            // the lane of a client that is not a cluster's
	lanes map[string]*lane // a cluster's, by master address ("": unknown)

	// busy counts the requests queued or in flight, and the callers
	// answered without Redis wait in yield for one of them to finish.
	busy    atomic.Int64
	waiters atomic.Int64
	wmu     sync.Mutex
	wcond   *sync.Cond // on wmu
	wgen    uint64     // moved on, under wmu, as a request finishes
}

// lane is the queue of one Redis server's requests, guarded by the
// committer's mu.
type lane struct {
	// addr is the cluster master the lane's keys hashed to when their
	// requests came; "" on any other client, or when the cluster client
	// could not tell (then its keys may lie on any master).
	addr     string
	pending  []*request
	inflight int
	// out holds when each batch that is out was taken (UnixNano), until
	// all of it is answered or has failed, and answered when the server
	// last answered a pipeline: together with failed they tell since when
	// it has answered nothing (see due).
	out      []int64
	answered int64
	failed   int64 // when the oldest batch taken since answered and found the server unavailable was taken
}

// Request states: a waiting caller and the pipeline that answers it race
// once, so that a caller who gave up never misses a slot it was given.
const (
	waiting int32 = iota
	delivered
	abandoned
)

// request is one decision's call on Redis, answered by the pipeline that
// sends it.
type request struct {
	lane   *lane // the queue it joined
	tenant string
	key    string
	master string // on a cluster, the address of key's master ("": not known), its lane's
	q      Quota
	gran   int64
	ids    []string
	fresh  bool // the gate generated ids: no one else can ask for them
	// notBefore is when the work will first run, Redis time µs; 0 when
	// it runs as soon as admitted. Requests with different ones are
	// decided in groups of their own.
	notBefore int64

	state  atomic.Int32
	sent   atomic.Int64  // UnixNano when a pipeline took it, to send it; 0 before
	budget time.Duration // how long Redis has to answer it from then
	done   chan struct{}
	ds     []Decision
	one    [1]Decision // ds for a single ID, without an allocation of its own
	hint   time.Time   // the key's retry hint, after the whole group
	err    error
}

// Group-commit bounds: requests per pipeline and pipelines in flight. With
// batching off every request is a pipeline of its own.
const (
	maxBatch           = 256
	maxFlight          = 2
	maxFlightUnbatched = 64
)

// commitScripts are the scripts a committer calls.
type commitScripts struct {
	admit, counter *redis.Script
}

// newCommitter returns a committer that sends to rdb, whose pipelines
// Redis has timeout to answer. With batching off, each request is a
// pipeline of its own.
func newCommitter(rdb redis.UniversalClient, s commitScripts, timeout time.Duration, batching bool) *committer {
	_, cluster := rdb.(*redis.ClusterClient)
	_, ring := rdb.(*redis.Ring)
	c := &committer{
		rdb:       rdb,
		admit:     s.admit,
		counter:   s.counter,
		crossKey:  !cluster && !ring,
		perNode:   cluster,
		maxBatch:  maxBatch,
		maxFlight: maxFlight,
		timeout:   timeout,
		one:       &lane{},
		lanes:     make(map[string]*lane),
	}
	if !batching {
		c.maxBatch, c.maxFlight = 1, maxFlightUnbatched
	}
	c.wcond = sync.NewCond(&c.wmu)
	return c
}

// yield holds a caller that was answered without Redis until one of the
// requests now queued or in flight has finished, and reports whether
// there was one. Such answers take a microsecond, and callers that loop
// on them (a tenant flooding its cached rejection) would otherwise stay
// ready to run, as many as there are, and the goroutines that send and
// read the gate's pipelines would wait behind every one of them for a
// processor: Go has no priorities. Waiting, they take no processor, so a
// reply Redis has sent is read at once; and each waits at most for the
// next request to finish, a round trip on a healthy Redis, or its timeout.
func (c *committer) yield() bool {
	if c.busy.Load() == 0 {
		return false
	}
	c.wmu.Lock()
	c.waiters.Add(1)
	for gen := c.wgen; gen == c.wgen && c.busy.Load() > 0; {
		c.wcond.Wait()
	}
	c.waiters.Add(-1)
	c.wmu.Unlock()
	return true
}

// finished wakes the callers in yield: a request is done.
func (c *committer) finished() {
	c.busy.Add(-1)
	if c.waiters.Load() == 0 {
		return
	}
	c.wmu.Lock()
	c.wgen++
	c.wmu.Unlock()
	c.wcond.Broadcast()
}

// do queues r and waits for its decisions, or for ctx, and returns Redis's
// errors as they are, for the caller to map. If ctx ends first, the call
// returns at once with the context's error. forget is called, off the
// caller's path, for a request whose generated IDs may hold slots nobody
// will use.
//
// The timeout counts only time spent waiting on Redis: do fails with
// context.DeadlineExceeded once budget has passed since a pipeline took r
// to send it, or once Redis has answered nothing for the timeout since a
// batch still out, or one that found it unavailable, was taken (see due).
// Time spent waiting for a processor before r is taken is the producer's.
// The wait never depends on the Redis connection, so it is bounded even
// for a client that ignores context deadlines.
func (c *committer) do(ctx context.Context, r *request, budget time.Duration, forget func(*request)) ([]Decision, error) {
	if budget <= 0 {
		return nil, context.DeadlineExceeded
	}
	r.budget = budget
	c.busy.Add(1)
	defer c.finished()
	c.enqueue([]*request{r}, forget)
	return c.await(ctx, r, budget)
}

// doAll is do for many requests at once, each with its own budget (set
// in it): they join their lanes together, so that each lane sends them in
// one pipeline (up to maxBatch), where requests that come one by one start
// a pipeline each while fewer than maxFlight are out. It returns each
// one's decisions and error, in their order.
func (c *committer) doAll(ctx context.Context, rs []*request, forget func(*request)) ([][]Decision, []error) {
	dss, errs := make([][]Decision, len(rs)), make([]error, len(rs))
	var send []*request
	for i, r := range rs {
		if r.budget <= 0 {
			errs[i] = context.DeadlineExceeded
		} else {
			send = append(send, r)
		}
	}
	c.busy.Add(int64(len(send)))
	c.enqueue(send, forget)
	start := time.Now()
	for i, r := range rs {
		if r.budget > 0 {
			dss[i], errs[i] = c.await(ctx, r, max(time.Until(start.Add(r.budget)), time.Millisecond))
			c.finished()
		}
	}
	return dss, errs
}

// enqueue puts rs in their lanes and starts the pipelines they need: in
// each lane, while fewer than maxFlight are out, one for every maxBatch
// requests waiting.
func (c *committer) enqueue(rs []*request, forget func(*request)) {
	var touched []*lane
	c.mu.Lock()
	for _, r := range rs {
		r.done = make(chan struct{})
		l := c.laneOf(r.master)
		r.lane = l
		l.pending = append(l.pending, r)
		if !slices.Contains(touched, l) {
			touched = append(touched, l)
		}
	}
	for _, l := range touched {
		for started := 0; l.inflight < c.maxFlight && started*c.maxBatch < len(l.pending); started++ {
			l.inflight++
			go c.flushLoop(l, forget)
		}
	}
	c.mu.Unlock()
}

// laneOf returns the lane of master ("": not known), making it if there
// is none. Called with c.mu held.
func (c *committer) laneOf(master string) *lane {
	if !c.perNode {
		return c.one
	}
	l := c.lanes[master]
	if l == nil {
		c.dropIdleLanes()
		l = &lane{addr: master}
		c.lanes[master] = l
	}
	return l
}

// await waits for r's decisions, checking first after wait whether Redis
// still has time to answer it (due), or for ctx, as do says.
func (c *committer) await(ctx context.Context, r *request, wait time.Duration) ([]Decision, error) {
	// A pooled timer rather than context.WithTimeout: this is the hot path,
	// and since Go 1.23 a stopped timer can be reset without draining.
	t, _ := c.timers.Get().(*time.Timer)
	if t == nil {
		t = time.NewTimer(wait)
	} else {
		t.Reset(wait)
	}
	defer func() {
		if !t.Stop() {
			// Under pre-1.23 timer semantics (a main module on an older go
			// line) a fired timer keeps its tick; never pool a stale one.
			select {
			case <-t.C:
			default:
			}
		}
		c.timers.Put(t)
	}()
	var gaveUp error
	for gaveUp == nil {
		select {
		case <-r.done:
			return r.ds, r.err
		case <-ctx.Done():
			gaveUp = context.Cause(ctx)
		case <-t.C:
			if next, ok := c.due(r); ok {
				t.Reset(time.Until(next))
			} else {
				gaveUp = context.DeadlineExceeded
			}
		}
	}
	if r.state.CompareAndSwap(waiting, abandoned) {
		return nil, gaveUp
	}
	<-r.done
	return r.ds, r.err
}

// maxLanes is how many lanes a committer keeps before it drops its idle
// ones: a cluster's masters, and those it had before failovers and moves.
const maxLanes = 64

// dropIdleLanes forgets, once there are maxLanes, the lanes with nothing
// waiting or out: masters a failover or a move has replaced. Called with
// c.mu held.
func (c *committer) dropIdleLanes() {
	if len(c.lanes) < maxLanes {
		return
	}
	for addr, l := range c.lanes {
		if len(l.pending) == 0 && l.inflight == 0 && len(l.out) == 0 {
			delete(c.lanes, addr)
		}
	}
}

// due reports whether Redis still has time to answer r, and until when:
// r's budget from when a pipeline took it, and no later than a timeout from
// when the oldest batch still out, or that found Redis unavailable, was
// taken if Redis has answered none since (r may have waited its turn
// behind that one). While neither holds, r waits for a processor, not for
// Redis, and is checked again a fraction of a timeout later.
func (c *committer) due(r *request) (time.Time, bool) {
	now := time.Now()
	var due time.Time
	if sent := r.sent.Load(); sent != 0 {
		due = time.Unix(0, sent).Add(r.budget)
	}
	l := r.lane
	c.mu.Lock()
	silent := int64(0)
	for _, s := range l.out {
		if s > l.answered && (silent == 0 || s < silent) {
			silent = s
		}
	}
	if l.failed > l.answered && (silent == 0 || l.failed < silent) {
		silent = l.failed
	}
	c.mu.Unlock()
	if d := time.Unix(0, silent).Add(c.timeout); silent != 0 && (due.IsZero() || d.Before(due)) {
		due = d
	}
	if due.IsZero() {
		return now.Add(c.timeout / 4), true
	}
	return due, now.Before(due)
}

// flushLoop sends lane l's waiting requests, a batch a pipeline, until
// none wait.
func (c *committer) flushLoop(l *lane, forget func(*request)) {
	for {
		c.mu.Lock()
		batch := l.pending
		if len(batch) == 0 {
			l.inflight--
			c.mu.Unlock()
			return
		}
		if n := c.cut(batch); n < len(batch) {
			l.pending = append([]*request(nil), batch[n:]...)
			batch = batch[:n]
		} else {
			l.pending = nil
		}
		c.mu.Unlock()

		// A pipeline that Redis has not answered within the timeout keeps
		// waiting in the background (go-redis ends it by its own
		// timeouts, seconds later without ContextTimeoutEnabled) and gives
		// its flight up: new requests go out, and they are what show the
		// breaker whether Redis is back. finished and detached are guarded
		// by c.mu.
		finished, detached := false, false
		t := time.AfterFunc(c.timeout, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if finished {
				return
			}
			detached = true
			l.inflight--
			if len(l.pending) > 0 && l.inflight < c.maxFlight {
				l.inflight++
				go c.flushLoop(l, forget)
			}
		})
		c.flush(l, batch, forget)
		t.Stop()
		c.mu.Lock()
		finished = true
		if detached {
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

// cut returns how many of the waiting requests pending one pipeline
// sends: at most maxBatch, holding at most MaxBatch IDs in all (so that
// no script call runs past the timeout), and at least one.
func (c *committer) cut(pending []*request) int {
	n, ids := 0, 0
	for n < len(pending) && n < c.maxBatch {
		ids += len(pending[n].ids)
		if n > 0 && ids > MaxBatch {
			break
		}
		n++
	}
	return n
}

// group is one script call's share of a batch: one tenant's requests, in
// arrival order. Most groups hold one request, whose IDs and pointer they
// borrow rather than copy.
type group struct {
	key  string
	q    Quota
	gran int64
	nb   int64 // the requests' notBefore
	ids  []string
	reqs []*request
	one  [1]*request
}

// flushState is what a flush groups a batch in, reused across flushes.
type flushState struct {
	all    []group
	groups []*group
	byKey  map[groupKey]*group
}

var flushStates = sync.Pool{New: func() any { return &flushState{byKey: make(map[groupKey]*group)} }}

// flush sends batch, lane l's, to Redis and delivers the replies, in
// three steps: it groups the requests (flushState.group), plans the script
// calls (plan) and sends them in one pipeline (run). It returns once every
// reply is delivered.
func (c *committer) flush(l *lane, batch []*request, forget func(*request)) {
	st := flushStates.Get().(*flushState)
	defer func() {
		st.reset()
		flushStates.Put(st)
	}()
	groups := st.group(batch)
	if len(groups) == 0 {
		return
	}
	taken := c.take(l, groups)
	defer c.returned(l, taken)
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.run(ctx, l, taken, c.plan(l, groups), forget)
}

// group gathers the requests of batch whose callers still wait into
// groups, one per groupKey, in arrival order; they live in st until reset.
func (st *flushState) group(batch []*request) []*group {
	all := st.all[:0]
	if cap(all) < len(batch) {
		all = make([]group, 0, len(batch)) // never grows: the pointers below stay valid
	}
	groups := st.groups[:0]
	for _, r := range batch {
		if r.state.Load() == abandoned {
			continue // its caller left before it was sent
		}
		k := groupKey{r.key, r.q, r.gran, r.notBefore}
		if g := st.byKey[k]; g != nil {
			g.ids = append(g.ids[:len(g.ids):len(g.ids)], r.ids...) // copies: never the caller's
			g.reqs = append(g.reqs, r)
			continue
		}
		all = append(all, group{key: r.key, q: r.q, gran: r.gran, nb: r.notBefore, ids: r.ids})
		g := &all[len(all)-1]
		g.one[0] = r
		g.reqs = g.one[:]
		st.byKey[k] = g
		groups = append(groups, g)
	}
	clear(st.byKey)
	st.all, st.groups = all, groups
	return groups
}

// reset drops the requests st holds, for the collector, and keeps its
// buffers.
func (st *flushState) reset() {
	clear(st.all)
	clear(st.groups)
	st.all, st.groups = st.all[:0], st.groups[:0]
}

// take marks the requests of groups, lane l's, as sent, now, and returns
// when: from then on they wait on Redis (see due), and the batch is out
// until returned.
func (c *committer) take(l *lane, groups []*group) int64 {
	taken := time.Now().UnixNano()
	for _, g := range groups {
		for _, r := range g.reqs {
			r.sent.Store(taken)
		}
	}
	c.mu.Lock()
	l.out = append(l.out, taken)
	c.mu.Unlock()
	return taken
}

// returned notes that no part of lane l's batch taken at taken is out any
// more.
func (c *committer) returned(l *lane, taken int64) {
	c.mu.Lock()
	if i := slices.Index(l.out, taken); i >= 0 {
		l.out = slices.Delete(l.out, i, i+1)
	}
	c.mu.Unlock()
}

// plan returns the script calls that decide groups, lane l's: the Log
// groups share one call of admit.lua and the Counter groups one of
// counter.lua, where keys may span slots or the lane is a known cluster
// master's (the keys then go in ARGV, queue). Elsewhere each group is a
// call of its own.
func (c *committer) plan(l *lane, groups []*group) [][]*group {
	if !c.crossKey && (!c.perNode || l.addr == "") {
		calls := make([][]*group, len(groups))
		for i, g := range groups {
			calls[i] = []*group{g}
		}
		return calls
	}
	var calls [][]*group
	var logs, counters []*group
	for _, g := range groups {
		if g.q.Mode == Log {
			logs = append(logs, g)
		} else {
			counters = append(counters, g)
		}
	}
	for _, call := range [][]*group{logs, counters} {
		if len(call) > 0 {
			calls = append(calls, call)
		}
	}
	return calls
}

// run sends calls in one pipeline and delivers their replies. What must
// be sent again goes by EVAL, in a pipeline of its own: a call that met
// Redis without its scripts (restarted empty, or flushed), since EVAL
// also caches the source again for the next EVALSHA; and each group of a
// call that failed with a script error, which may be one tenant's key (of
// the wrong type, say) and must not fail the others. Slots already
// recorded then come back as Existing, since IDs are idempotent. A call
// that met no script
// and then failed by EVAL is split too; a group alone is never sent a
// third time.
func (c *committer) run(ctx context.Context, l *lane, taken int64, calls [][]*group, forget func(*request)) {
	for eval := false; len(calls) > 0; eval = true {
		res, errs := c.exec(ctx, l, taken, calls, eval)
		var again [][]*group
		for i, call := range calls {
			switch err := errs[i]; {
			case err == nil:
				c.deliver(call, res[i], nil, forget)
			case isNoScript(err) && !eval:
				again = append(again, call)
			case len(call) > 1 && !outOfMemory(err) && (!unavailable(err) || c.perNode && slotBusy(err)):
				// One tenant's key (of the wrong type, say, or on a cluster
				// in a slot that moved or is not served: MOVED, ASK, a
				// CLUSTERDOWN of the slot) must not fail the others. OOM and
				// a server that is down or busy are the server's.
				for _, g := range call {
					again = append(again, []*group{g})
				}
			default:
				c.deliver(call, nil, err, forget)
			}
		}
		calls = again
	}
}

// errNoMaster fails, unsent, a call of several tenants whose master the
// cluster client could not name; run then decides each tenant alone.
var errNoMaster = errors.New("admitq: the cluster client names no master for the call")

// slotBusy reports whether err is a cluster node's refusal of one slot,
// not of itself: the slot is not served (CLUSTERDOWN Hash slot not
// served), or the node was a master and is a replica now (READONLY), so
// its tenants go elsewhere, each alone.
func slotBusy(err error) bool {
	if !busy(err) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "CLUSTERDOWN Hash slot not served") || strings.HasPrefix(msg, "READONLY")
}

// groupKey is what the requests of one group share.
type groupKey struct {
	key  string
	q    Quota
	gran int64
	nb   int64
}

// exec sends one script call per entry of calls in a single pipeline, by
// EVALSHA, or by EVAL when eval is set, and returns each call's reply.
// taken is when the batch was taken.
//
// On a cluster a call of several tenants goes to its master by the
// master's own client, which follows no redirect: a MOVED or ASK reply to
// its first key comes back as an error, and run decides each tenant alone.
// Through the cluster client, an ASK followed with ASKING would let the
// script reach every key of an importing slot on that node, keys not yet
// migrated included, and decide them there. The cluster client's own
// hooks do not see these calls; its node clients' do.
func (c *committer) exec(ctx context.Context, l *lane, taken int64, calls [][]*group, eval bool) ([][]int64, []error) {
	pipe := c.rdb.Pipeline()
	var direct redis.Pipeliner // the master's own, for calls of several tenants
	cmds := make([]scriptCmd, len(calls))
	for i, call := range calls {
		p := pipe
		if c.perNode && len(call) > 1 {
			if direct == nil {
				node, err := c.rdb.(*redis.ClusterClient).MasterForKey(ctx, call[0].key)
				if err != nil {
					cmd := redis.NewIntSliceCmd(ctx)
					cmd.SetErr(fmt.Errorf("%w: %w", errNoMaster, err))
					cmds[i] = cmd
					continue
				}
				direct = node.Pipeline()
			}
			p = direct
		}
		cmds[i] = c.queue(ctx, p, call, eval)
	}
	res := make([][]int64, len(calls))
	errs := make([]error, len(calls))
	if pipe.Len() == 0 && direct == nil {
		for i, cmd := range cmds {
			res[i], errs[i] = cmd.Result() // none went out: nothing to hear
		}
		return res, errs
	}
	key, started := calls[0][0].key, time.Now()
	late := c.reportLate(key, started)
	// errors are read per command below
	if direct != nil && pipe.Len() > 0 {
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = direct.Exec(ctx) })
		_, _ = pipe.Exec(ctx)
		wg.Wait()
	} else if direct != nil {
		_, _ = direct.Exec(ctx)
	} else {
		_, _ = pipe.Exec(ctx)
	}
	reported := late != nil && !late.Stop()
	for i, cmd := range cmds {
		res[i], errs[i] = cmd.Result()
	}
	answered, down := c.heard(l, taken, errs)
	if c.report != nil && (answered || !reported) {
		c.report(key, started, down)
	}
	return res, errs
}

// queue adds call's script call to pipe, by EVALSHA, or by EVAL when eval
// is set. Its keys are declared, but on a cluster, where declared keys
// must share a slot, a call of several tenants (one master's) declares the
// first, which routes it, and names every key in ARGV, after "logs" (or
// "windows" for counter.lua): the scripts reach them with their flag
// allow-cross-slot-keys. A key that has left the master since fails the
// call before it writes, and run decides each tenant alone.
func (c *committer) queue(ctx context.Context, pipe redis.Pipeliner, call []*group, eval bool) scriptCmd {
	script, named := c.admit, "logs"
	if call[0].q.Mode == Counter {
		script, named = c.counter, "windows"
	}
	declared := call
	if c.perNode && len(call) > 1 {
		declared = call[:1]
	}
	args := make([]any, 3, 3+len(declared)+c.argsLen(call)) // EVALSHA, its hash, the keys, ARGV
	for _, g := range declared {
		args = append(args, g.key)
	}
	if len(declared) < len(call) {
		args = append(args, named, len(call))
		for _, g := range call {
			args = append(args, g.key)
		}
	}
	args = c.appendAdmitArgs(args, call, script == c.admit)
	if eval { // rare: Redis lost its scripts
		keys := make([]string, len(declared))
		for j, g := range declared {
			keys[j] = g.key
		}
		return int64s{script.Eval(ctx, pipe, keys, args[3+len(declared):]...)}
	}
	// An IntSliceCmd reads the reply's numbers as they come, where a Cmd
	// boxes each into an interface and copies them out again.
	args[0], args[1], args[2] = "evalsha", script.Hash(), len(declared)
	cmd := redis.NewIntSliceCmd(ctx, args...)
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// reportLate reports a pipeline sent at started still unanswered at the
// timeout, which go-redis without ContextTimeoutEnabled would end only at
// its ReadTimeout, seconds later. Nil when nothing hears reports.
func (c *committer) reportLate(key string, started time.Time) *time.Timer {
	if c.report == nil {
		return nil
	}
	return time.AfterFunc(c.timeout, func() {
		c.report(key, started, fmt.Errorf("%w: no reply within %v", context.DeadlineExceeded, c.timeout))
	})
}

// heard records, for due, what a pipeline's errors say of Redis: answered
// when any call got an answer (a script error is one), else down, the
// first error that shows Redis unavailable.
func (c *committer) heard(l *lane, taken int64, errs []error) (answered bool, down error) {
	for _, err := range errs {
		switch {
		case errors.Is(err, errNoMaster):
			// never sent: it says nothing of Redis
		case err == nil || !unavailable(err):
			answered = true
		case down == nil:
			down = err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case answered:
		l.answered = max(l.answered, time.Now().UnixNano())
		return true, nil
	case down != nil && taken > l.answered && (l.failed <= l.answered || taken < l.failed):
		l.failed = taken
	}
	return false, down
}

// scriptCmd is a script call in a pipeline, its reply read as numbers.
type scriptCmd interface {
	redis.Cmder
	Result() ([]int64, error)
}

// int64s is a Cmd as a scriptCmd.
type int64s struct{ *redis.Cmd }

func (c int64s) Result() ([]int64, error) { return c.Int64Slice() }

// deliver splits one script reply among the requests of its groups.
func (c *committer) deliver(call []*group, res []int64, err error, forget func(*request)) {
	off := 1
	for _, g := range call {
		if err == nil && len(res) < off+3*len(g.ids)+1 {
			err = errors.New("admitq: admit script returned a short reply")
		}
		var hint int64
		if err == nil {
			hint = res[off+3*len(g.ids)]
		}
		for _, r := range g.reqs {
			if err != nil {
				r.err = err
			} else {
				// Each request's part, and the group's hint for every one:
				// it speaks of the log after all of them, which each
				// request's caller sees only once the call is done.
				n := 3 * len(r.ids)
				r.parse(res[0], res[off:off+n], hint)
				off += n
			}
			// Slots Redis may have recorded for nobody: the caller left, or
			// got an error although the script may have run. Only the
			// gate's own IDs are given back; a caller's ID keeps its slot,
			// which a retry with that ID gets back.
			if abandoned := r.hand(); r.fresh && (abandoned || r.err != nil) {
				forget(r)
			}
		}
		off++ // the group's hint
	}
}

// hand gives r's caller its answer, and reports whether the caller had
// left instead.
func (r *request) hand() (abandoned bool) {
	if !r.state.CompareAndSwap(waiting, delivered) {
		return true
	}
	close(r.done)
	return false
}

// argsLen bounds the ARGV of call's script: admit.lua's when each group
// has a quota of its own and its log in ARGV, which is more than
// counter.lua's.
func (c *committer) argsLen(call []*group) int {
	n := 3
	for _, g := range call {
		n += 1 + 4 + 3 + len(g.ids)
	}
	return n
}

// appendAdmitArgs appends admit.lua's ARGV for call to args: the quotas its
// groups use, each once, then each group's quota index, not-before time,
// count and, with ids (counter.lua keeps none), IDs.
func (c *committer) appendAdmitArgs(args []any, call []*group, ids bool) []any {
	var quotas []groupKey // usually one; searched while few, then mapped
	var byQuota map[groupKey]int
	index := make([]int, 0, len(call))
	for _, g := range call {
		k := groupKey{q: g.q, gran: g.gran}
		i, ok := -1, false
		if byQuota != nil {
			i, ok = byQuota[k]
		} else if i = slices.Index(quotas, k); i >= 0 {
			ok = true
		}
		if !ok {
			i = len(quotas)
			quotas = append(quotas, k)
			if byQuota != nil {
				byQuota[k] = i
			} else if len(quotas) == 8 {
				byQuota = make(map[groupKey]int, len(call))
				for qi, qk := range quotas {
					byQuota[qk] = qi
				}
			}
		}
		index = append(index, i)
	}
	args = append(args, len(quotas)) // ints under 256 box without allocating
	for _, k := range quotas {
		args = append(args, k.q.Limit, k.q.Window.Microseconds(), k.q.MaxDelay.Microseconds(), k.gran)
	}
	for j, g := range call {
		args = append(args, index[j]+1, g.nb, len(g.ids)) // nb is 0 but for scheduled work: no allocation
		if !ids {
			continue
		}
		for _, id := range g.ids {
			args = append(args, id)
		}
	}
	return args
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
