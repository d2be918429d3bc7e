package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/freshid"
	"github.com/admitq/admitq/lua"
)

// DefaultPermitLease is how long a permit lasts while its task waits in a
// queue, with no worker running it: a reconciler renews it after checking
// that the task is still there (see Permits.Renew).
const DefaultPermitLease = 30 * time.Second

// WithPermitLease sets how long a permit lasts while its task waits in a
// queue with no worker running it (DefaultPermitLease when 0 or less).
// Reconcilers check such a task against asynq when its lease runs out, so
// this is also how soon a task deleted from outside gives its permit back.
func WithPermitLease(d time.Duration) Option {
	return optionFunc(func(o *options) { o.permitLease = d })
}

// waitLease is the lease of a permit whose task is not running.
func (g *Gate) waitLease() time.Duration {
	if g.opts.permitLease > 0 {
		return g.opts.permitLease
	}
	return DefaultPermitLease
}

// Ref names a task that holds or waits for a permit under a tenant's
// MaxInFlight: its entry ID (the log's, and enqueue's task ID) and the
// queue it waits in. The gate only stores Queue, for whoever hands the task
// its permit; enqueue puts asynq's queue name there.
type Ref struct {
	ID    string
	Queue string
}

// member is r as stored in Redis: "<len(Queue)>:<Queue><ID>". The length
// makes any queue name and ID safe; release.lua reads the ID back.
func (r Ref) member() string {
	return strconv.Itoa(len(r.Queue)) + ":" + r.Queue + r.ID
}

// parseRef reads what member wrote.
func parseRef(s string) (Ref, error) {
	n, rest, ok := strings.Cut(s, ":")
	l, err := strconv.Atoi(n)
	if !ok || err != nil || l < 0 || l > len(rest) {
		return Ref{}, fmt.Errorf("admitq: malformed permit ref %q", s)
	}
	return Ref{Queue: rest[:l], ID: rest[l:]}, nil
}

// Depth keys, under the tenant's hash tag like its log.
func permitsKey(prefix, tenant string) string { return prefix + ":{" + tenant + "}:permits" }
func parkedKey(prefix, tenant string) string  { return prefix + ":{" + tenant + "}:parked" }
func dueKey(prefix, tenant string) string     { return prefix + ":{" + tenant + "}:due" }

// notBeforeKey holds the not-before times of parked tasks that have one,
// for release.lua to apply when it hands them a permit.
func notBeforeKey(prefix, tenant string) string { return prefix + ":{" + tenant + "}:notbefore" }

// depthKey is the set of tenants that may hold permits or parked tasks,
// which reconcilers walk. It is a key of its own (its own cluster slot),
// written apart from the tenants' scripts.
func depthKey(prefix string) string { return prefix + ":depth" }

// depthScripts are the scripts of capped tenants.
type depthScripts struct {
	permit, release, lease *redis.Script
}

func newDepthScripts() depthScripts {
	return depthScripts{permit: lua.Permit(), release: lua.Release(), lease: lua.Lease()}
}

// AdmitTasks decides tasks for tenant in order, as AdmitBatch decides
// their IDs, and also holds the tenant to its Quota.MaxInFlight: a task
// that finds the tenant's permits all taken, or older tasks parked, is
// Parked, and one that finds the parked backlog full (Quota.MaxParked) is
// Rejected with Decision.Full set. A tenant with no cap takes AdmitBatch's
// path, unchanged; Queue is then not used.
//
// Every admitted or deferred task of a capped tenant holds a permit until
// its worker gives it back (Permits.Finish); a parked task holds none until
// Permits hands it one.
func (g *Gate) AdmitTasks(ctx context.Context, tenant string, tasks []Ref) ([]Decision, error) {
	return g.AdmitTasksAt(ctx, tenant, tasks, time.Time{})
}

// AdmitTasksAt is AdmitTasks for tasks that will not start before
// notBefore, as AdmitAt says: each is charged for when it will first run.
// A parked task keeps notBefore with its place in the FIFO: when a permit
// is handed to it, its slot is the later of notBefore and the slot rule's
// (Grant.At), and it holds the permit from then on, so the tasks parked
// after it wait behind it.
func (g *Gate) AdmitTasksAt(ctx context.Context, tenant string, tasks []Ref, notBefore time.Time) ([]Decision, error) {
	if err := ValidateTenant(tenant); err != nil {
		return nil, err
	}
	q, err := g.quota(ctx, tenant)
	if err != nil || q.MaxInFlight == 0 || len(tasks) == 0 {
		return g.AdmitBatchAt(ctx, tenant, refIDs(tasks), notBefore)
	}
	for _, t := range tasks {
		if t.ID == "" {
			return nil, fmt.Errorf("%w: empty entry ID", ErrInvalidID)
		}
	}
	return g.admitCapped(ctx, tenant, q, tasks, notBeforeµs(notBefore))
}

// admitCapped runs permit.lua for tasks of a tenant capped by q, through
// the group commit: on one Redis, one permit.lua call decides the capped
// requests of a batch, tenant by tenant; on a cluster each is a call of
// its own, in its master's pipeline.
func (g *Gate) admitCapped(ctx context.Context, tenant string, q Quota, tasks []Ref, nb int64) ([]Decision, error) {
	now := time.Now()
	p := g.newPermitCall(tenant, q, tasks, nb)
	key := p.keys[0] // the log: the breaker's, and the one the pipeline reports
	brk := g.breakerFor(ctx, key)
	if brk.isOpen() {
		return g.withoutRedis(tenant, q, refIDs(tasks), now, fmt.Errorf("%w: admit %q: breaker open", ErrUnavailable, tenant))
	}
	r := &request{tenant: tenant, key: key, q: q, gran: g.gran, ids: refIDs(tasks), notBefore: nb, permit: p, fresh: freshid.Marked(ctx)}
	ds, err := g.commit.do(ctx, r, g.opts.timeout, g.forget)
	if err != nil {
		err = callError(ctx, "admit", tenant, err)
		if errors.Is(err, ErrUnavailable) {
			// Counted here as well as by the pipeline's report, as decide
			// does: before the caller can call again.
			brk.failure(err, now)
			if ds, err = g.withoutRedis(tenant, q, r.ids, now, err); err == nil {
				// Decided without Redis (FailOpen): the tasks may be
				// written, and rely on what the script may have taken.
				return ds, nil
			}
		}
		if r.fresh && r.unused.Add(1) == 2 {
			g.forget(r) // the script may have run, and no task will be written
		}
		return nil, err
	}
	if p.noted {
		// Reconcilers must know the tenant before anything of it can wait
		// on them. A failure here is not the caller's: the next parked
		// task of the tenant, or a finishing task, tries again. It has
		// what the decision's one timeout has left from when its call was
		// sent.
		if left := g.opts.timeout - time.Since(time.Unix(0, r.sent.Load())); left > 0 {
			cctx, cancel := context.WithTimeout(ctx, left)
			defer cancel()
			_ = bounded(cctx, func(ctx context.Context) error {
				return g.rdb.SAdd(ctx, depthKey(g.opts.prefix), tenant).Err()
			})
		}
	}
	return ds, nil
}

// forgetPermits gives back, in the background (giveBack), what a capped
// request of fresh IDs may hold although its caller left, or got an error
// and no decision: its tasks' slots in the log, and their permits or
// places among the parked, which would otherwise stay taken until their
// leases lapse and a reconciler finds no task (a parked one, until it is
// handed a permit).
// No task of the request was written, and no retry can ask for its IDs.
// Freed permits are handed on by the next release, as when a task
// finishes: a worker's, or a reconciler's.
func (g *Gate) forgetPermits(r *request) {
	p := r.permit
	refs := make([]string, len(p.tasks))
	for i, t := range p.tasks {
		refs[i] = t.member()
	}
	start := time.Now()
	if nb := time.UnixMicro(r.notBefore); r.notBefore > 0 && nb.After(start) {
		start = nb
	}
	// A slot leaves the window as forget's do; a permit is looked at
	// again once its lease lapses; a parked task is handed one in its
	// turn, which may be later than either.
	until := start.Add(max(r.q.MaxDelay+r.q.Window+time.Duration(r.gran)*time.Microsecond, g.waitLease()) + giveBackSlack)
	g.back.add(r.tenant, p.keys[0], r.ids, until) // the log
	g.back.add(r.tenant, p.keys[1], refs, until)  // permits
	g.back.add(r.tenant, p.keys[2], refs, until)  // parked
	g.back.addFields(r.tenant, p.keys[3], refs, until)
	// A release may have handed a parked one a permit before this lands.
	g.back.add(r.tenant, dueKey(g.opts.prefix, r.tenant), refs, until)
}

// permitCall is a capped request's part of a permit.lua call: its keys and
// ARGV, which the committer sends alone or in a batch with others, and
// parse, which reads its part of the reply.
type permitCall struct {
	keys  []string
	args  []any
	tasks []Ref
	// noted says, once the reply is parsed, that reconcilers must learn
	// of the tenant: it held no permit and parked nothing before the call,
	// or a task parked, or a task was decided by an earlier call (whose
	// caller may not have heard).
	noted bool
}

func (g *Gate) newPermitCall(tenant string, q Quota, tasks []Ref, nb int64) *permitCall {
	args := make([]any, 0, 9+2*len(tasks))
	args = append(args, q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), g.gran,
		q.MaxInFlight, q.parkedBound(), g.waitLease().Microseconds(), nb, len(tasks))
	for _, t := range tasks {
		args = append(args, t.ID, t.member())
	}
	keys := []string{logKey(g.opts.prefix, tenant), permitsKey(g.opts.prefix, tenant),
		parkedKey(g.opts.prefix, tenant), notBeforeKey(g.opts.prefix, tenant)}
	return &permitCall{keys: keys, args: args, tasks: tasks}
}

// parse reads the call's part of a permit.lua reply (its flag, then its
// tasks' decisions), made at Redis time nowµs, into the tasks' decisions.
func (p *permitCall) parse(tenant string, nowµs int64, res []int64) ([]Decision, error) {
	if len(res) != 1+3*len(p.tasks) {
		return nil, fmt.Errorf("admitq: permit script returned %d values for a tenant's %d tasks", len(res), len(p.tasks))
	}
	ds := make([]Decision, len(p.tasks))
	note := false
	for i, t := range p.tasks {
		code, at, remaining := res[1+3*i], res[2+3*i], res[3+3*i]
		d := Decision{Tenant: tenant, ID: t.ID, Now: time.UnixMicro(nowµs), At: time.UnixMicro(at), Remaining: int(remaining)}
		if !setOutcome(&d, code) {
			return nil, fmt.Errorf("admitq: permit script returned outcome %d", code)
		}
		note = note || code >= 3 && code <= 6 // parked, or decided earlier
		ds[i] = d
	}
	p.noted = res[0] == 1 || note
	return ds, nil
}

// refsOf names ids with no queue: AdmitBatch's callers have none.
func refsOf(ids []string) []Ref {
	refs := make([]Ref, len(ids))
	for i, id := range ids {
		refs[i] = Ref{ID: id}
	}
	return refs
}

func refIDs(tasks []Ref) []string {
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	return ids
}

// depthUsage fills u's permit and parked counts, read-only, in one round
// trip: one tenant's keys share a slot, so a cluster pipelines them too.
func (g *Gate) depthUsage(ctx context.Context, u *Usage) error {
	cctx, cancel := context.WithTimeout(ctx, g.opts.timeout)
	defer cancel()
	var held, waiting *redis.IntCmd
	var head *redis.ZSliceCmd
	err := bounded(cctx, func(ctx context.Context) error {
		_, err := g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			held = p.ZCard(ctx, permitsKey(g.opts.prefix, u.Tenant))
			waiting = p.ZCard(ctx, parkedKey(g.opts.prefix, u.Tenant))
			head = p.ZRangeWithScores(ctx, parkedKey(g.opts.prefix, u.Tenant), 0, 0)
			return nil
		})
		return err
	})
	if err != nil {
		return callError(ctx, "usage", u.Tenant, err)
	}
	u.InFlight, u.Parked = int(held.Val()), int(waiting.Val())
	if z := head.Val(); len(z) == 1 {
		u.OldestParked = time.UnixMicro(int64(z[0].Score))
	}
	return nil
}
