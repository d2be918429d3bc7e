package admission

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/bounded"
	"github.com/admitq/admitq/internal/freshid"
	"github.com/admitq/admitq/lua"
)

// Gate decides, per tenant, whether work is admitted now, deferred to a
// reserved slot or rejected, on a sliding-window log kept in Redis. Every
// decision is one atomic script call on Redis server time, so any number of
// Gates in any number of processes share one exact limit per tenant.
//
// A Gate is safe for concurrent use, and meant to be shared: concurrent
// calls are group-committed into shared pipelines. Make one with New; a
// zero or nil Gate answers every call with an error, never a decision. Most callers want Admit, or AdmitID when they
// have an ID of their own to make retries idempotent; AdmitBatch decides
// many in one round trip.
type Gate struct {
	rdb     redis.UniversalClient
	quotas  Quotas
	opts    options
	gran    int64 // deferral rounding, µs
	admit   *redis.Script
	usage   *redis.Script
	counter *redis.Script
	// counter mode's Usage and Release (counter_usage.lua, counter_release.lua)
	counterUsage, counterRelease *redis.Script
	ids                          *idGen

	commit *committer // one request a pipeline when batching is off
	deny   *denyCache // nil when the deny cache is off
	brk    *breaker   // Redis's, or on a cluster, for keys of no known master
	nodes  *nodeBreakers
	local  *localLimiter
	causes *causes   // names why Redis is unavailable
	back   *giveBack // removes the entries of fresh IDs no one will use

	version *versionCheck
}

// errNotMade is what a Gate that New did not make answers, where a call
// on it would otherwise panic: a zero Gate never reads as admitted.
var errNotMade = errors.New("admitq: the Gate was not made by admission.New")

// made returns errNotMade for a nil or zero Gate.
func (g *Gate) made() error {
	if g == nil || g.commit == nil {
		return errNotMade
	}
	return nil
}

// New returns a Gate that keeps its logs in rdb and looks quotas up in
// quotas. rdb may be a plain, failover or cluster client; the caller owns it
// and closes it. New panics if rdb or quotas is nil.
func New(rdb redis.UniversalClient, quotas Quotas, opts ...Option) *Gate {
	if rdb == nil || quotas == nil {
		panic("admission: New needs a non-nil redis.UniversalClient and Quotas")
	}
	o := newOptions(opts)
	g := &Gate{
		rdb:            rdb,
		quotas:         quotas,
		opts:           o,
		gran:           o.granularity.Microseconds(),
		admit:          lua.Admit(),
		usage:          lua.Usage(),
		counter:        lua.Counter(),
		counterUsage:   lua.CounterUsage(),
		counterRelease: lua.CounterRelease(),
		ids:            newIDGen(),
		local:          newLocalLimiter(o.instances),
		causes:         watchCauses(rdb),
	}
	g.version = newVersionCheck(rdb, o.timeout, g.warnEviction)
	// Unbatched calls go through the committer too, one request a
	// pipeline: its callers wait on their context, not on the connection,
	// so a frozen Redis cannot hold them past the timeout even when the
	// client ignores context deadlines (ContextTimeoutEnabled unset).
	g.commit = newCommitter(rdb, commitScripts{g.admit, g.counter}, o.timeout, o.batching)
	if o.denyCache {
		g.deny = newDenyCache(100_000, o.timeout)
	}
	g.back = newGiveBack(rdb, o.timeout, g.forgetDenial)
	g.brk = newBreaker(func(ctx context.Context) error { return rdb.Ping(ctx).Err() }, o.timeout, o.logger)
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		g.nodes = &nodeBreakers{cc: cc, timeout: o.timeout, logger: o.logger, causes: g.causes, m: make(map[string]*nodeBreaker)}
	}
	// Every pipeline tells the breaker of its Redis how it went, even when
	// all its callers have left: callers whose own deadlines are shorter
	// than the timeout would otherwise never open it while Redis is down,
	// and would wait their deadlines out on every call. A pipeline runs to
	// the timeout, so a stall shorter than that opens nothing, whatever
	// the callers' deadlines.
	g.commit.report = func(key string, started time.Time, err error) {
		brk := g.breakerFor(context.Background(), key)
		if err != nil {
			brk.failure(err, started)
		} else {
			brk.success()
		}
	}
	return g
}

// Close stops the gate's background work: the probe that runs while Redis
// is unavailable. It does not close the Redis client, which the caller
// owns. A closed gate still decides, but no longer notices Redis coming
// back once its breaker has opened.
func (g *Gate) Close() error {
	if g.made() != nil {
		return nil
	}
	g.brk.close()
	g.nodes.close()
	g.back.close()
	return nil
}

// Granularity returns how deferred slots are rounded up.
func (g *Gate) Granularity() time.Duration {
	if g == nil {
		return 0
	}
	return time.Duration(g.gran) * time.Microsecond
}

// AtGranularity returns a Gate that shares g's Redis client, quotas and
// state but rounds deferred slots up to a whole multiple of d (see
// WithGranularity). enqueue uses it to get asynq's one second.
func (g *Gate) AtGranularity(d time.Duration) *Gate {
	if g == nil {
		return nil
	}
	c := *g
	c.gran = max(d, time.Microsecond).Microseconds()
	return &c
}

// Admit decides one request for tenant under a generated entry ID.
func (g *Gate) Admit(ctx context.Context, tenant string) (Decision, error) {
	ds, err := g.admitBatch(ctx, tenant, nil, time.Time{}, true)
	if err != nil {
		return Decision{}, err
	}
	return ds[0], nil
}

// AdmitID decides one request for tenant under the entry ID id. It is
// idempotent: while id is in the log, asking again returns its original slot
// (with Existing set) and takes no second one, so a producer that retries
// after a timeout does not burn quota.
func (g *Gate) AdmitID(ctx context.Context, tenant, id string) (Decision, error) {
	ds, err := g.AdmitBatch(ctx, tenant, []string{id})
	if err != nil {
		return Decision{}, err
	}
	return ds[0], nil
}

// MaxBatch is the most IDs one AdmitBatch or AdmitBatchAt call, or one
// Batch of AdmitBatches, decides: about 30 ms of Redis's time in one script
// call, within the gate's default timeout with room to spare. A larger
// batch is ErrBatchTooLarge; split it. The group commit sends at most
// MaxBatch IDs in a pipeline, whatever its callers ask at once.
const MaxBatch = 10_000

// AdmitBatch decides len(ids) requests for tenant in one Redis round trip,
// in order: slots never go backwards through the batch, and once one request
// is rejected so is every one after it. It takes at most MaxBatch IDs.
func (g *Gate) AdmitBatch(ctx context.Context, tenant string, ids []string) ([]Decision, error) {
	return g.AdmitBatchAt(ctx, tenant, ids, time.Time{})
}

// AdmitAt is AdmitID for work that will not start before notBefore, such as
// a task scheduled for later: the work is charged for when it will first
// run, not for now. Its slot is the first free one at or after notBefore
// (and after every slot already given: slots never go backwards), and
// MaxDelay is measured from notBefore, so it is Deferred to a slot at most
// MaxDelay past notBefore, or Rejected. A zero notBefore, or one that has
// passed on Redis's clock, is AdmitID. notBefore is read on the caller's
// clock and compared with Redis server time.
func (g *Gate) AdmitAt(ctx context.Context, tenant, id string, notBefore time.Time) (Decision, error) {
	ds, err := g.AdmitBatchAt(ctx, tenant, []string{id}, notBefore)
	if err != nil {
		return Decision{}, err
	}
	return ds[0], nil
}

// AdmitBatchAt is AdmitBatch for work that will not start before
// notBefore, as AdmitAt says.
func (g *Gate) AdmitBatchAt(ctx context.Context, tenant string, ids []string, notBefore time.Time) ([]Decision, error) {
	if ids == nil {
		ids = []string{} // nil asks admitBatch for a generated ID
	}
	// package enqueue marks the IDs it made itself: like the gate's own,
	// their slots go back when the caller leaves before the decision.
	return g.admitBatch(ctx, tenant, ids, notBefore, freshid.MadeAll(ctx, ids))
}

// admitBatch decides ids for work that starts at notBefore (zero: when
// admitted); fresh says the gate generated them, so none can be in the log
// yet. Nil ids is Admit's one ID, which the gate generates once the quota
// says what form of it the log keeps best (idGen.next).
func (g *Gate) admitBatch(ctx context.Context, tenant string, ids []string, notBefore time.Time, fresh bool) (_ []Decision, err error) {
	if err := g.made(); err != nil {
		return nil, err
	}
	defer func() { err = g.causes.explain(err) }()
	a, ds, ok, err := g.asking(ctx, tenant, ids, notBefore, fresh)
	if !ok {
		return ds, err
	}
	return g.decide(ctx, &a)
}

// asking checks admitBatch's request and looks its tenant's quota up. It
// returns the ask for decide and true, or false and the answer where none
// is needed: an error, no IDs, or decisions made without Redis (a quota
// without a rate limit, or one guessed while Redis is away). The ask is a
// value, so that it stays on the caller's stack (see decide).
func (g *Gate) asking(ctx context.Context, tenant string, ids []string, notBefore time.Time, fresh bool) (ask, []Decision, bool, error) {
	if err := validate(tenant, ids); err != nil {
		return ask{}, nil, false, err
	}
	if ids != nil && len(ids) == 0 {
		return ask{}, nil, false, nil
	}
	if ctx.Err() != nil {
		// Already over: not decided, so nothing is recorded, whatever the
		// deny cache or a racing group commit would have answered.
		return ask{}, nil, false, callError(ctx, "admit", tenant, ctx.Err())
	}
	q, err := g.quota(ctx, tenant)
	var guess *guessedQuotaError
	if errors.As(err, &guess) {
		// Redis is away and the quota is a guess: good enough to decide
		// locally, never to record slots in Redis.
		g.brk.failure(err, time.Now())
		ds, err := g.withoutRedis(tenant, guess.q, orNew(ids, g.ids, guess.q), time.Now(), err)
		return ask{}, ds, false, err
	}
	if err != nil {
		return ask{}, nil, false, err
	}
	if q.Unlimited() {
		return ask{}, unlimited(tenant, orNew(ids, g.ids, q), time.Now()), false, nil
	}
	if err := g.checkVersion(ctx); err != nil {
		return ask{}, nil, false, err
	}
	ids = orNew(ids, g.ids, q)
	return ask{tenant: tenant, key: windowKey(g.opts.prefix, tenant, q), q: q, gran: g.gran, ids: ids, fresh: fresh, notBefore: notBeforeMicros(notBefore)}, nil, true, nil
}

// unlimited admits ids for tenant, whose quota has no rate limit
// (NoLimit), without Redis: nothing is recorded, so there is nothing to
// count, release or give back.
func unlimited(tenant string, ids []string, now time.Time) []Decision {
	ds := make([]Decision, len(ids))
	for i, id := range ids {
		ds[i] = Decision{Tenant: tenant, Outcome: Admitted, ID: id, Now: now, At: now, Remaining: NoLimit, Local: true}
	}
	return ds
}

// ask is what one decision is asked, built once by admitBatch and read by
// every step of decide. The request for the group commit is made from it
// only when the decision goes to Redis: a cached rejection allocates none.
type ask struct {
	tenant    string
	key       string // the tenant's log or counter (windowKey)
	q         Quota
	gran      int64
	ids       []string
	fresh     bool   // the gate generated ids: no one else can ask for them
	together  bool   // AdmitBatches asks it with others, sent only once all are prepared
	notBefore int64  // Redis time µs; 0 when the work runs as soon as admitted
	master    string // on a cluster, the address of key's master ("": not known)
}

// request returns a new request of the group commit for a.
func (a *ask) request() *request {
	return &request{tenant: a.tenant, key: a.key, master: a.master, q: a.q, gran: a.gran, ids: a.ids, fresh: a.fresh, notBefore: a.notBefore}
}

func (a *ask) denyKey() denyKey { return denyKey{a.tenant, a.q, a.gran} }

// validate checks a tenant and the entry IDs asked for it.
func validate(tenant string, ids []string) error {
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	if len(ids) > MaxBatch {
		return fmt.Errorf("%w: %d IDs for tenant %q, at most MaxBatch (%d) a call", ErrBatchTooLarge, len(ids), tenant, MaxBatch)
	}
	for _, id := range ids {
		if id == "" {
			return fmt.Errorf("%w: empty entry ID", ErrInvalidID)
		}
		if len(id) > MaxIDLen {
			return fmt.Errorf("%w: an entry ID of %d bytes, at most MaxIDLen (%d)", ErrInvalidID, len(id), MaxIDLen)
		}
	}
	return nil
}

// orNew returns ids, or for nil one new ID from gen for a log of q.
func orNew(ids []string, gen *idGen, q Quota) []string {
	if ids == nil {
		return []string{gen.next(logBound(q))}
	}
	return ids
}

func (g *Gate) quota(ctx context.Context, tenant string) (Quota, error) {
	q, err := g.quotas.Quota(ctx, tenant)
	if err != nil {
		return Quota{}, err
	}
	if err := q.Validate(); err != nil {
		return Quota{}, fmt.Errorf("tenant %q: %w", tenant, err)
	}
	return q, nil
}

// decide answers a locally when the FailOpen fallback's count or a cached
// rejection says so, and otherwise asks Redis, whose retry hint goes to
// the deny cache.
func (g *Gate) decide(ctx context.Context, a *ask) ([]Decision, error) {
	var p prepared
	if ds, done, err := g.prepare(ctx, a, &p); done {
		return ds, err
	}
	ds, hint, err := g.remote(ctx, a, p.dl.left())
	return g.conclude(a, &p, ds, hint, err)
}

// prepared is what decide learns of a decision before it asks Redis, and
// needs again once Redis has answered (conclude).
type prepared struct {
	now time.Time
	brk *breaker
	dl  deadline
	gen uint64 // the deny cache's generation of the tenant
}

// prepare does decide's steps before Redis: it looks up the master of a's
// key and its breaker, and answers a without Redis (done) when the breaker
// is open, the FailOpen fallback's count rejects it or the deny cache
// holds a rejection.
func (g *Gate) prepare(ctx context.Context, a *ask, p *prepared) (_ []Decision, done bool, _ error) {
	p.now = time.Now()
	// One lookup of the key's master, for its breaker and its lane in the
	// group commit.
	node := g.nodes.master(ctx, a.key)
	if node != nil {
		a.master = node.Options().Addr
	}
	p.brk = g.breakerAt(ctx, node, a.key)
	if p.brk.isOpen() {
		ds, err := g.withoutRedis(a.tenant, a.q, a.ids, p.now, fmt.Errorf("%w: admit %q: breaker open", ErrUnavailable, a.tenant))
		return ds, true, err
	}
	p.dl = deadline{timeout: g.opts.timeout}
	if ds, ok := g.guard(ctx, a, p.now, &p.dl); ok {
		return ds, true, nil
	}
	if ds, ok := g.cached(ctx, a, p.now, &p.dl); ok {
		return ds, true, nil
	}
	p.gen = g.deny.generation(a.tenant)
	return nil, false, nil
}

// conclude is decide's last step, once Redis has answered a (remote): the
// retry hint goes to the deny cache, and the breaker and the FailOpen
// fallback hear how it went.
func (g *Gate) conclude(a *ask, p *prepared, ds []Decision, hint time.Time, err error) ([]Decision, error) {
	g.deny.put(a.denyKey(), ds, hint, time.Now(), p.gen)
	if errors.Is(err, ErrUnavailable) {
		// The gate's own timeout, not the caller's deadline (that error
		// is the caller's, and its pipeline reports to the breaker, see
		// New). Counted here as well, before the caller can call again,
		// so that its next call is a failure of its own; as of when the
		// decision began, so that decisions that overlap one failure
		// count as one.
		p.brk.failure(err, p.now)
		return g.withoutRedis(a.tenant, a.q, a.ids, p.now, err)
	}
	if err != nil {
		return nil, err
	}
	p.brk.success()
	if g.opts.policy == FailOpen && a.notBefore == 0 {
		// What the fallback must not hand out again. A request that
		// starts later says nothing of the window now.
		g.local.observe(a.tenant, a.q, ds, time.Now())
	}
	return ds, nil
}

// deadline bounds a decision's Redis calls and waits together: one
// timeout, however many there are, from when the first began. The group
// commit's request gets what is left, counted from when it is taken to be
// sent (committer.do). Time before the first wait is the producer's, not
// Redis's, and is not counted.
type deadline struct {
	timeout time.Duration
	at      time.Time // zero until the first call or wait begins
}

// start starts d at t, unless an earlier call started it, and returns it.
func (d *deadline) start(t time.Time) time.Time {
	if d.at.IsZero() {
		d.at = t.Add(d.timeout)
	}
	return d.at
}

// left returns how long the decision's calls have left.
func (d *deadline) left() time.Duration {
	if d.at.IsZero() {
		return d.timeout
	}
	return time.Until(d.at)
}

// guard applies, under FailOpen, what the fallback admitted during an
// outage: it counts until it leaves the window, and Redis is told of it
// (replay). When a's batch does not fit whole it is rejected whole, which
// never admits too many, and guard returns those decisions and true.
func (g *Gate) guard(ctx context.Context, a *ask, now time.Time, dl *deadline) ([]Decision, bool) {
	if g.opts.policy != FailOpen {
		return nil, false
	}
	n, at, debt := g.local.guard(a.tenant, a.q, len(a.ids), now)
	if debt > 0 {
		dl.start(time.Now())
		g.replay(ctx, a, debt, dl.left())
	}
	if n < len(a.ids) {
		return rejectAll(a.tenant, a.ids, now, at), true
	}
	return nil, false
}

// cached answers a from the deny cache, when a rejection of its tenant
// holds and none of a's IDs may already hold a slot. A request that
// starts later (notBefore set) may find its slot free, so it always asks
// Redis, without touching the cache. A wait for another request's answer
// (a probe) counts as the decision's own.
func (g *Gate) cached(ctx context.Context, a *ask, now time.Time, dl *deadline) ([]Decision, bool) {
	if a.notBefore != 0 {
		return nil, false
	}
	d, ok, waited := g.deny.lookup(ctx, a.denyKey(), now, !a.together)
	if waited > 0 {
		dl.start(now)
	}
	if !ok || !a.fresh && a.q.Mode != Counter && g.held(ctx, a, dl.start(time.Now())) {
		return nil, false
	}
	if waited == 0 && !a.together { // a caller that waited for a probe has let the gate's replies in already
		g.yieldLocal()
	}
	// now, not a fresh reading: on a busy producer time.Now is a sizeable
	// part of a cached rejection's cost.
	return d.decisions(a.tenant, a.ids, now.Add(waited)), true
}

// breakerFor returns the breaker of the Redis that serves key: on a
// cluster, its master's, so that one master down opens no breaker for the
// tenants of the others.
func (g *Gate) breakerFor(ctx context.Context, key string) *breaker {
	return g.breakerAt(ctx, g.nodes.master(ctx, key), key)
}

// breakerAt is breakerFor for a caller that has looked up key's master,
// node (nil: none, or not a cluster).
func (g *Gate) breakerAt(ctx context.Context, node *redis.Client, key string) *breaker {
	if b := g.nodes.of(ctx, node, key); b != nil {
		return b
	}
	return g.brk
}

// held reports whether any of a's IDs may already hold a slot in its
// tenant's log, in which case the deny cache must not answer: a retried
// ID gets its original slot back. One ZMSCORE, far cheaper for Redis than
// the script; when it fails, the script decides.
func (g *Gate) held(ctx context.Context, a *ask, deadline time.Time) bool {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	key, ids := logKey(g.opts.prefix, a.tenant), a.ids // not a: it stays on the caller's stack
	var scores []float64
	err := bounded.Call(ctx, func(ctx context.Context) (err error) {
		scores, err = g.rdb.ZMScore(ctx, key, ids...).Result()
		return err
	})
	if err != nil {
		return true
	}
	for _, s := range scores {
		if s != 0 { // go-redis reads a missing member as 0; no slot is 0
			return true
		}
	}
	return false
}

// yieldLocal lets the goroutines that send and read Redis calls run
// before a decision made without Redis returns: callers that loop on such
// decisions, a microsecond each, would otherwise hold the processors while
// Redis's replies wait unread past the timeout. A caller the deny cache
// answered waits for one of the gate's requests now out (committer.yield);
// without Redis (withoutRedis) it only yields, since a wait there would add
// other calls' timeouts to its own.
func (g *Gate) yieldLocal() {
	if !g.commit.yield() {
		runtime.Gosched()
	}
}

// withoutRedis decides while Redis is unavailable, as the failure policy
// says.
func (g *Gate) withoutRedis(tenant string, q Quota, ids []string, now time.Time, err error) ([]Decision, error) {
	runtime.Gosched() // see yieldLocal
	if g.opts.policy == FailOpen {
		if q.Unlimited() { // a guess (see admitBatch): nothing to count
			return unlimited(tenant, ids, now), nil
		}
		return g.local.admit(tenant, q, ids, now), nil
	}
	return nil, err
}

// remote decides a on Redis, through the group commit. Redis has budget
// to answer, from when the request is taken to be sent (see committer.do).
//
// Besides the decisions it returns the script's retry hint: zero, or the
// Redis time until which every new request of the tenant will be rejected.
func (g *Gate) remote(ctx context.Context, a *ask, budget time.Duration) ([]Decision, time.Time, error) {
	r := a.request()
	ds, err := g.commit.do(ctx, r, budget, g.forget)
	if err != nil {
		return nil, time.Time{}, callError(ctx, "admit", a.tenant, err)
	}
	return ds, r.hint, nil
}

// parse reads r's part of a script reply: the server time nowUs; res,
// which holds outcome, slot and remaining for each of r's IDs; and the
// retry hint (see admit.lua), 0 for none. It sets r.ds, r.hint and r.err.
func (r *request) parse(nowUs int64, res []int64, hintUs int64) {
	r.ds, r.hint, r.err = nil, time.Time{}, nil
	if len(res) != 3*len(r.ids) {
		r.err = fmt.Errorf("admitq: admit script returned %d values for %d IDs", len(res), len(r.ids))
		return
	}
	ds := r.one[:]
	if len(r.ids) != 1 {
		ds = make([]Decision, len(r.ids))
	}
	now := time.UnixMicro(nowUs)
	for i, id := range r.ids {
		code, at, remaining := res[3*i], res[3*i+1], res[3*i+2]
		d := Decision{Tenant: r.tenant, ID: id, Now: now, At: time.UnixMicro(at), Remaining: int(remaining)}
		if code > 4 || !setOutcome(&d, code) {
			r.err = fmt.Errorf("admitq: admit script returned outcome %d", code)
			return
		}
		ds[i] = d
	}
	r.ds = ds
	if hintUs > 0 {
		r.hint = time.UnixMicro(hintUs)
	}
}

// forget gives back r's fresh IDs (see giveBack): the script may have
// recorded them for a caller that left or got an error. Removing an ID
// that is not there is harmless. Counter mode keeps no IDs, so such a slot
// there idles until its window passes.
func (g *Gate) forget(r *request) {
	if r.q.Mode == Counter {
		return
	}
	// Freeing slots, like Release: no cached rejection may outlive it.
	g.forgetDenial(r.tenant)
	start := time.Now()
	if nb := time.UnixMicro(r.notBefore); r.notBefore > 0 && nb.After(start) {
		start = nb
	}
	g.back.add(r.tenant, r.key, r.ids, start.Add(r.q.MaxDelay+r.q.Window+time.Duration(r.gran)*time.Microsecond+giveBackSlack))
}

// giveBackSlack covers, in how long a removal is worth retrying, a
// difference between the local clock and Redis's.
const giveBackSlack = time.Second

// forgetDenial drops tenant's cached rejection, and any that calls now in
// flight would bring back: a slot is being freed.
func (g *Gate) forgetDenial(tenant string) { g.deny.forget(tenant) }

// Release gives back the slot a decision took, for work that was admitted
// but then not started (say, the enqueue after admission failed). It does
// nothing for a rejected or local decision, which took no slot in Redis.
// In Log mode releasing twice is harmless; Counter mode keeps no IDs, so
// release each decision at most once. Release uses the tenant's quota as
// it is now: a decision made in Counter mode and released after the quota
// changed to Log gives nothing back (its count leaves with its window).
//
// When Release fails without an answer from Redis (it is unavailable, or
// ctx ended), a Log-mode slot whose ID no one else can hold, one Admit
// made or one package enqueue made for a single call, is still given
// back: the gate retries in the background until Redis takes it, the slot
// leaves its window, or the gate closes. A caller's own ID is not, since
// a retry may admit it again in the meantime.
func (g *Gate) Release(ctx context.Context, d Decision) (err error) {
	if err := g.made(); err != nil {
		return err
	}
	defer func() { err = g.causes.explain(err) }()
	if d.ID == "" || d.Local || d.Outcome == Rejected {
		return nil
	}
	if err := ValidateTenant(d.Tenant); err != nil {
		return err
	}
	// Before, so that no cached rejection answers while the slot is freed;
	// after the write is done (even one this call stopped waiting for), so
	// that none from a call that ran before it landed is cached.
	g.forgetDenial(d.Tenant)
	q, err := g.quota(ctx, d.Tenant)
	if err != nil && !errors.Is(err, ErrNoQuota) {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, g.opts.timeout)
	defer cancel()
	err = bounded.Call(cctx, func(ctx context.Context) error {
		defer g.forgetDenial(d.Tenant)
		if q.Mode == Counter {
			// A decision made before the quota changed from Log holds its
			// slot in the log; the counter must not give back one it
			// never gave.
			if n, err := g.rdb.ZRem(ctx, logKey(g.opts.prefix, d.Tenant), d.ID).Result(); err != nil || n == 1 {
				return err
			}
			// The script finds the bucket: it knows the width it counts
			// with, which need not be the quota's any more.
			return g.counterRelease.Run(ctx, g.rdb, []string{counterKey(g.opts.prefix, d.Tenant)}, d.At.UnixMicro()).Err()
		}
		return g.rdb.ZRem(ctx, logKey(g.opts.prefix, d.Tenant), d.ID).Err()
	})
	if err != nil {
		if q.Mode == Log && !isReply(err) && (freshid.Made(ctx, d.ID) || g.ids.owns(d.ID)) {
			// No one else can hold the ID: give it back when Redis can
			// take it, or the slot stays taken for nothing.
			g.back.add(d.Tenant, logKey(g.opts.prefix, d.Tenant), []string{d.ID}, time.Now().Add(time.Until(d.At)+q.Window+giveBackSlack))
		}
		return callError(ctx, "release", d.Tenant, err)
	}
	return nil
}

// Usage is a snapshot of one tenant's log.
type Usage struct {
	Tenant string
	Quota  Quota
	// Now is the Redis server time of the snapshot.
	Now time.Time
	// InWindow is the number of slots in the window (Now-Window, Now]; in
	// Counter mode, the entries the window's buckets hold.
	InWindow int
	// Reserved is the number of deferred slots after Now.
	Reserved int
	// NextFree is the slot a request arriving now would get (before
	// rounding); Now when it would be admitted.
	NextFree time.Time
}

// unlimitedUsage is the usage of a tenant whose quota q has no rate limit
// (NoLimit): no window is kept, so nothing is in it or ahead, and a
// request now is admitted now. Now is the local clock.
func unlimitedUsage(tenant string, q Quota) Usage {
	now := time.Now()
	return Usage{Tenant: tenant, Quota: q, Now: now, NextFree: now}
}

// Usage reports tenant's current use of its quota. It writes nothing. For
// a quota with no rate limit (NoLimit) it reads nothing either: see
// unlimitedUsage.
func (g *Gate) Usage(ctx context.Context, tenant string) (_ Usage, err error) {
	if err := g.made(); err != nil {
		return Usage{}, err
	}
	defer func() { err = g.causes.explain(err) }()
	if err := ValidateTenant(tenant); err != nil {
		return Usage{}, err
	}
	q, err := g.quota(ctx, tenant)
	if err != nil {
		return Usage{}, err
	}
	if q.Unlimited() {
		return unlimitedUsage(tenant, q), nil
	}
	if err := g.checkVersion(ctx); err != nil {
		return Usage{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.opts.timeout)
	defer cancel()
	script, args := g.usage, []any{q.Limit, q.Window.Microseconds()}
	if q.Mode == Counter {
		script = g.counterUsage
	}
	var res []int64
	err = bounded.Call(cctx, func(ctx context.Context) (err error) {
		res, err = script.Run(ctx, g.rdb, []string{windowKey(g.opts.prefix, tenant, q)}, args...).Int64Slice()
		return err
	})
	if err != nil {
		return Usage{}, callError(ctx, "usage", tenant, err)
	}
	if len(res) != 4 {
		return Usage{}, fmt.Errorf("admitq: usage script returned %d values", len(res))
	}
	u := Usage{
		Tenant:   tenant,
		Quota:    q,
		Now:      time.UnixMicro(res[0]),
		InWindow: int(res[1]),
		Reserved: int(res[2]),
		NextFree: time.UnixMicro(res[3]),
	}
	return u, nil
}

// callError maps a failed Redis call to the error a caller sees: the
// caller's own context error when ctx (the caller's, not the per-call
// deadline) is done, ErrUnavailable when Redis could not be reached or
// answered in time, and the Redis error otherwise.
func callError(ctx context.Context, op, tenant string, err error) error {
	if cerr := context.Cause(ctx); cerr != nil {
		return fmt.Errorf("admitq: %s %q: %w", op, tenant, cerr)
	}
	if unavailable(err) {
		return fmt.Errorf("%w: %s %q: %w", ErrUnavailable, op, tenant, err)
	}
	if moved(err) {
		// A cluster client follows MOVED; only a plain client on a
		// cluster node lets it through.
		return fmt.Errorf("%w: %s %q: %w; use a cluster client (redis.NewClusterClient, or --redis-cluster)", ErrClusterNode, op, tenant, err)
	}
	return fmt.Errorf("admitq: %s %q: %w", op, tenant, err)
}

// moved reports whether err is a cluster node's MOVED reply.
func moved(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "MOVED ")
}

// notBeforeMicros is the scripts' not-before argument for t: 0 for none, and
// for a time already past, so that such requests join the requests
// without one, in their groups.
func notBeforeMicros(t time.Time) int64 {
	if t.IsZero() || !t.After(time.Now()) {
		return 0
	}
	return t.UnixMicro()
}
