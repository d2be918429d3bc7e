package admission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/freshid"
	"github.com/admitq/admitq/lua"
)

// Gate decides, per tenant, whether work is admitted now, deferred to a
// reserved slot or rejected, on a sliding-window log kept in Redis. Every
// decision is one atomic script call on Redis server time, so any number of
// Gates in any number of processes share one exact limit per tenant.
//
// A Gate is safe for concurrent use, and meant to be shared: concurrent
// calls are group-committed into shared pipelines. Make one with New; the
// zero value is not usable. Most callers want Admit, or AdmitID when they
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
	depth                        depthScripts // capped tenants' scripts (permit.go)

	commit *committer // one request a pipeline when batching is off
	deny   *denyCache // nil when the deny cache is off
	brk    *breaker   // Redis's, or on a cluster, for keys of no known master
	nodes  *nodeBreakers
	local  *localLimiter
	causes *causes   // names why Redis is unavailable
	back   *giveBack // removes the entries of fresh IDs no one will use

	version *versionCheck
}

// Group-commit bounds: requests per pipeline and pipelines in flight. With
// batching off every request is a pipeline of its own.
const (
	maxBatch           = 256
	maxFlight          = 2
	maxFlightUnbatched = 64
)

// New returns a Gate that keeps its logs in rdb and looks quotas up in
// quotas. rdb may be a plain, failover or cluster client; the caller owns it
// and closes it.
func New(rdb redis.UniversalClient, quotas Quotas, opts ...Option) *Gate {
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
		depth:          newDepthScripts(),
		local:          newLocalLimiter(o.instances),
		causes:         watchCauses(rdb),
		version:        &versionCheck{},
	}
	// Unbatched calls go through the committer too, one request a
	// pipeline: its callers wait on their context, not on the connection,
	// so a frozen Redis cannot hold them past the timeout even when the
	// client ignores context deadlines (ContextTimeoutEnabled unset).
	if o.batching {
		g.commit = newCommitter(rdb, g.admit, g.counter, g.depth.permit, o.timeout, maxBatch, maxFlight)
	} else {
		g.commit = newCommitter(rdb, g.admit, g.counter, g.depth.permit, o.timeout, 1, maxFlightUnbatched)
	}
	if o.denyCache {
		g.deny = newDenyCache(100_000, o.timeout)
	}
	g.back = newGiveBack(rdb, o.timeout, g.forgetDenial)
	g.brk = newBreaker(func(ctx context.Context) error { return rdb.Ping(ctx).Err() }, o.timeout, o.logger)
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		g.nodes = &nodeBreakers{cc: cc, timeout: o.timeout, logger: o.logger, m: make(map[string]*nodeBreaker)}
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
	g.brk.close()
	g.nodes.close()
	g.back.close()
	return nil
}

// Granularity returns how deferred slots are rounded up.
func (g *Gate) Granularity() time.Duration { return time.Duration(g.gran) * time.Microsecond }

// AtGranularity returns a Gate that shares g's Redis client, quotas and
// state but rounds deferred slots up to a whole multiple of d (see
// WithGranularity). enqueue uses it to get asynq's one second.
func (g *Gate) AtGranularity(d time.Duration) *Gate {
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

// AdmitBatch decides len(ids) requests for tenant in one Redis round trip,
// in order: slots never go backwards through the batch, and once one request
// is rejected so is every one after it.
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
	return g.admitBatch(ctx, tenant, ids, notBefore, freshid.Marked(ctx))
}

// admitBatch decides ids for work that starts at notBefore (zero: when
// admitted); fresh says the gate generated them, so none can be in the log
// yet. Nil ids is Admit's one ID, which the gate generates once the quota
// says what form of it the log keeps best (idGen.next).
func (g *Gate) admitBatch(ctx context.Context, tenant string, ids []string, notBefore time.Time, fresh bool) (_ []Decision, err error) {
	defer func() { err = g.causes.explain(err) }()
	if err := ValidateTenant(tenant); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if id == "" {
			return nil, fmt.Errorf("%w: empty entry ID", ErrInvalidID)
		}
	}
	if ids != nil && len(ids) == 0 {
		return nil, nil
	}
	began := time.Now()
	if err := g.checkVersion(ctx); err != nil {
		return nil, err
	}
	q, err := g.quota(ctx, tenant)
	var guess *guessedQuotaError
	if errors.As(err, &guess) {
		// Redis is away and the quota is a guess: good enough to decide
		// locally, never to record slots in Redis.
		g.brk.failure(err, time.Now())
		return g.withoutRedis(tenant, guess.q, orNew(ids, g.ids, guess.q), time.Now(), err)
	}
	if err != nil {
		return nil, err
	}
	ids = orNew(ids, g.ids, q)
	nb := notBeforeµs(notBefore)
	if q.MaxInFlight > 0 {
		return g.admitCapped(ctx, tenant, q, refsOf(ids), nb) // permit.go
	}
	return g.decide(ctx, tenant, q, ids, nb, fresh, began)
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

// decide answers ids from the deny cache when a rejection of tenant
// holds, and otherwise asks Redis, whose retry hint goes to the cache. nb
// is the requests' not-before time (µs, 0 for now). checked is when the
// call began, before the first call's version check (checkVersion), which
// counts against the timeout like a Redis call.
func (g *Gate) decide(ctx context.Context, tenant string, q Quota, ids []string, nb int64, fresh bool, checked time.Time) ([]Decision, error) {
	now := time.Now()
	// One timeout for the decision's Redis calls, however many it takes:
	// deadline bounds those made directly, and the group commit's request
	// gets what the others have not spent, counted from when it is taken
	// to be sent (committer.do).
	deadline := checked.Add(g.opts.timeout)
	var spent time.Duration
	key := windowKey(g.opts.prefix, tenant, q)
	brk := g.breakerFor(ctx, key)
	if brk.isOpen() {
		return g.withoutRedis(tenant, q, ids, now, fmt.Errorf("%w: admit %q: breaker open", ErrUnavailable, tenant))
	}
	if g.opts.policy == FailOpen {
		// Back from an outage: what the fallback admitted still counts
		// until it leaves the window, and Redis is told of it. A batch
		// that does not fit whole is rejected whole, which never admits
		// too many.
		n, at, debt := g.local.guard(tenant, q, len(ids), now)
		if debt > 0 {
			t0 := time.Now()
			g.replay(ctx, tenant, key, q, debt, g.opts.timeout)
			spent += time.Since(t0)
		}
		if n < len(ids) {
			return rejectAll(tenant, ids, now, at), nil
		}
	}
	// The deny cache may hold the caller for another request's answer
	// from Redis (a probe): that wait counts as the decision's own. (The
	// local path reads the clock no more than it must: on a busy producer
	// time.Now is a sizeable part of a cached rejection's cost.)
	d, ok, waited := g.denied(ctx, tenant, q, nb, now)
	spent += waited
	if ok {
		answer := fresh || q.Mode == Counter
		if !answer {
			t0 := time.Now()
			answer = !g.held(ctx, tenant, ids, deadline)
			spent += time.Since(t0)
		}
		if answer {
			if waited == 0 { // a caller that waited for a probe has let the gate's replies in already
				g.yieldLocal()
			}
			return d.decisions(tenant, ids, now.Add(waited)), nil
		}
	}
	gen := g.deny.generation(tenant)
	ds, hint, err := g.remote(ctx, tenant, key, q, ids, nb, fresh, g.opts.timeout-spent)
	g.deny.put(tenant, q, g.gran, ds, hint, time.Now(), gen)
	if errors.Is(err, ErrUnavailable) {
		// The gate's own timeout, not the caller's deadline (that error
		// is the caller's, and its pipeline reports to the breaker, see
		// New). Counted here as well, before the caller can call again,
		// so that its next call is a failure of its own; as of when the
		// decision began, so that decisions that overlap one failure
		// count as one.
		brk.failure(err, now)
		return g.withoutRedis(tenant, q, ids, now, err)
	}
	if err != nil {
		return nil, err
	}
	brk.success()
	if g.opts.policy == FailOpen && nb == 0 {
		// What the fallback must not hand out again. A request that
		// starts later says nothing of the window now.
		g.local.observe(tenant, q, ds, time.Now())
	}
	return ds, nil
}

// breakerFor returns the breaker of the Redis that serves key: on a
// cluster, its master's, so that one master down opens no breaker for the
// tenants of the others.
func (g *Gate) breakerFor(ctx context.Context, key string) *breaker {
	if b := g.nodes.of(ctx, key); b != nil {
		return b
	}
	return g.brk
}

// held reports whether any of the caller's ids may already hold a slot in
// tenant's log, in which case the deny cache must not answer: a retried ID
// gets its original slot back. One ZMSCORE, far cheaper for Redis than the
// script; when it fails, the script decides.
func (g *Gate) held(ctx context.Context, tenant string, ids []string, deadline time.Time) bool {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var scores []float64
	err := bounded(ctx, func(ctx context.Context) (err error) {
		scores, err = g.rdb.ZMScore(ctx, logKey(g.opts.prefix, tenant), ids...).Result()
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

// yieldLocal lets the goroutines that send and read Redis calls run,
// before a decision made without Redis returns. Such a decision takes a
// microsecond, and callers that loop on them (a tenant flooding its cached
// rejection, every caller while the breaker is open) would otherwise run
// until the scheduler preempts them, 10 ms at a time, while the goroutines
// that send and read Redis calls wait their turn behind them: with 144
// such callers on 2 cores, a reply from a healthy Redis went unread for
// 250-430 ms, past the timeout, and the gate reported Redis unavailable.
//
// A caller answered by the deny cache, which Redis has just told to
// reject, waits for one of the gate's requests now out to finish
// (committer.yield): Redis answers them, so the wait is a round trip, and
// a caller that waits takes no processor. Without Redis (withoutRedis:
// the breaker is open, or the caller's own call failed) it only yields its
// processor: a wait there would add the timeouts of other calls to its own.
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
		return g.local.admit(tenant, q, ids, now), nil
	}
	return nil, err
}

// remote decides on Redis, through the group commit. Redis has budget to
// answer, from when the request is taken to be sent (see committer.do).
//
// Besides the decisions it returns the script's retry hint: zero, or the
// Redis time until which every new request of tenant will be rejected.
func (g *Gate) remote(ctx context.Context, tenant, key string, q Quota, ids []string, nb int64, fresh bool, budget time.Duration) ([]Decision, time.Time, error) {
	r := &request{tenant: tenant, key: key, q: q, gran: g.gran, ids: ids, fresh: fresh, notBefore: nb}
	ds, err := g.commit.do(ctx, r, budget, g.forget)
	if err != nil {
		return nil, time.Time{}, callError(ctx, "admit", tenant, err)
	}
	return ds, r.hint, nil
}

// appendCounterArgs appends counter.lua's ARGV for n requests that start
// at nb (µs, 0 for now).
func appendCounterArgs(args []any, q Quota, gran int64, n int, nb int64) []any {
	return append(args, q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), gran, counterBuckets, n, nb)
}

// parseDecisions reads a script reply for ids: the server time nowµs; res,
// which holds outcome, slot and remaining for each ID; and the retry hint
// (see admit.lua), 0 for none. It fills ds when it has room for every ID.
func parseDecisions(ds []Decision, tenant string, ids []string, nowµs int64, res []int64, hintµs int64) ([]Decision, time.Time, error) {
	if len(res) != 3*len(ids) {
		return nil, time.Time{}, fmt.Errorf("admitq: admit script returned %d values for %d IDs", len(res), len(ids))
	}
	var hint time.Time
	if hintµs > 0 {
		hint = time.UnixMicro(hintµs)
	}
	now := time.UnixMicro(nowµs)
	if len(ds) != len(ids) {
		ds = make([]Decision, len(ids))
	}
	for i, id := range ids {
		code, at, remaining := res[3*i], res[3*i+1], res[3*i+2]
		d := Decision{Tenant: tenant, ID: id, Now: now, At: time.UnixMicro(at), Remaining: int(remaining)}
		if code > 4 || !setOutcome(&d, code) {
			return nil, time.Time{}, fmt.Errorf("admitq: admit script returned outcome %d", code)
		}
		ds[i] = d
	}
	return ds, hint, nil
}

// forget gives back r's fresh IDs (see giveBack): the script may have
// recorded them for a caller that left or got an error. Removing an ID
// that is not there is harmless. Counter mode keeps no IDs, so such a slot
// there idles until its window passes. A capped request's tasks also give
// back their permits and parked places (forgetPermits).
func (g *Gate) forget(r *request) {
	if r.permit != nil {
		g.forgetPermits(r) // permit.go
		return
	}
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
	err = bounded(cctx, func(ctx context.Context) error {
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
		if q.Mode == Log && !isReply(err) && (freshid.Marked(ctx) || g.ids.owns(d.ID)) {
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
	// InFlight is the permits the tenant holds under Quota.MaxInFlight:
	// its tasks in the worker queues. 0 when it has no cap.
	InFlight int
	// Parked is the tenant's tasks waiting for a permit, and OldestParked
	// when the first of them was parked (zero when none is).
	Parked       int
	OldestParked time.Time
}

// Usage reports tenant's current use of its quota. It writes nothing.
func (g *Gate) Usage(ctx context.Context, tenant string) (_ Usage, err error) {
	defer func() { err = g.causes.explain(err) }()
	if err := ValidateTenant(tenant); err != nil {
		return Usage{}, err
	}
	if err := g.checkVersion(ctx); err != nil {
		return Usage{}, err
	}
	q, err := g.quota(ctx, tenant)
	if err != nil {
		return Usage{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.opts.timeout)
	defer cancel()
	script, args := g.usage, []any{q.Limit, q.Window.Microseconds()}
	if q.Mode == Counter {
		script, args = g.counterUsage, appendCounterArgs(nil, q, 1, 0, 0)
	}
	var res []int64
	err = bounded(cctx, func(ctx context.Context) (err error) {
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
	if q.MaxInFlight > 0 {
		if err := g.depthUsage(ctx, &u); err != nil {
			return Usage{}, err
		}
	}
	return u, nil
}

// bounded runs call and returns when it does or when ctx ends, whichever
// is first. A go-redis client without ContextTimeoutEnabled ignores context
// deadlines while it waits for a reply; the call then finishes in the
// background, bounded by the client's ReadTimeout.
func bounded(ctx context.Context, call func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
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
	return fmt.Errorf("admitq: %s %q: %w", op, tenant, err)
}

// unavailable reports whether err means Redis could not serve the call now:
// it could not be reached, did not answer in time, or said it cannot serve
// (loading, read-only replica, cluster down). Anything else, such as a
// wrong key type or a script error, is an answer, not an outage.
func unavailable(err error) bool {
	var nerr net.Error
	var rerr redis.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &nerr),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout):
		return true
	case errors.As(err, &rerr):
		for _, p := range []string{"LOADING", "READONLY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "BUSY"} {
			if strings.HasPrefix(rerr.Error(), p) {
				return true
			}
		}
	}
	return false
}

// isReply reports whether err is an error reply from Redis that says it
// served the call (a wrong key type, say), not that it could not.
func isReply(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && !unavailable(err)
}

// notBeforeµs is the scripts' not-before argument for t: 0 for none, and
// for a time already past, so that such requests join the requests
// without one, in their groups.
func notBeforeµs(t time.Time) int64 {
	if t.IsZero() || !t.After(time.Now()) {
		return 0
	}
	return t.UnixMicro()
}

// denied returns the deny cache's answer for requests that start now. One
// that starts later (nb > 0) may find its slot free, so it always asks
// Redis, without touching the cache.
func (g *Gate) denied(ctx context.Context, tenant string, q Quota, nb int64, now time.Time) (denial, bool, time.Duration) {
	if nb != 0 {
		return denial{}, false, 0
	}
	return g.deny.lookup(ctx, tenant, q, g.gran, now)
}
