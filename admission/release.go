package admission

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Permits is the worker side of Quota.MaxInFlight: it gives back the
// permits of tasks that have ended, hands them to parked tasks, and keeps
// the leases of tasks in the queues. package worker drives it; most users
// never call it. Get one from Gate.Permits.
//
// Every method is safe to call from any number of workers at once, and
// repeating one is harmless: giving back a permit twice frees it once.
type Permits struct {
	g *Gate
}

// Permits returns g's permit operations.
func (g *Gate) Permits() *Permits { return &Permits{g: g} }

// Grant is a permit handed to a parked task: the task may enter its queue
// at At, its slot under the rate rule and no earlier than the not-before
// time it was parked with (Gate.AdmitTasksAt); at once when At is not
// after Now. It holds the permit meanwhile.
type Grant struct {
	Tenant string
	Ref    Ref
	At     time.Time
	// Parked is when the task was parked (its place in the FIFO).
	Parked time.Time
	// Now is the Redis time of the grant.
	Now time.Time
}

// Depth is a tenant's permits and parked backlog after a Permits call.
type Depth struct {
	Tenant string
	Now    time.Time
	// InFlight is the permits held: tasks of the tenant in the queues or
	// granted a slot.
	InFlight int
	// Parked is the tasks waiting for a permit; OldestParked is when the
	// first of them was parked, zero when none is.
	Parked       int
	OldestParked time.Time
	// Grants are the permits this call handed to parked tasks, oldest
	// first. Each must be moved into its queue at its At, and then
	// acknowledged with Permits.Started.
	Grants []Grant
	// Lapsed (Reconcile only) are permits whose lease is over: whether
	// their tasks are still in the queues must be checked.
	Lapsed []Ref
	// Due (Reconcile only) are tasks granted earlier whose slot passed a
	// couple of seconds ago but which were never acknowledged: the worker that was to move them
	// into their queue may have died.
	Due []Grant
}

// maxGrants bounds the permits one call hands out, so that raising a cap
// from 1 to a million does not make one script run long.
const maxGrants = 256

// dueGrace is how long after its slot a grant is left to the worker that
// made it before Reconcile lists it as due for any worker to move.
const dueGrace = 2 * time.Second

// Finish gives back the permit of ref, a task of tenant that has ended for
// good, and hands free permits to the tenant's oldest parked tasks.
func (p *Permits) Finish(ctx context.Context, tenant string, ref Ref) (Depth, error) {
	return p.release(ctx, "finish", tenant, ref.member(), false)
}

// Reconcile hands free permits to parked tasks (after a cap was raised,
// say), and lists lapsed permits and due grants for the caller to check.
func (p *Permits) Reconcile(ctx context.Context, tenant string) (Depth, error) {
	return p.release(ctx, "reconcile", tenant, "", true)
}

func (p *Permits) release(ctx context.Context, op, tenant, member string, scan bool) (Depth, error) {
	if err := ValidateTenant(tenant); err != nil {
		return Depth{}, err
	}
	g := p.g
	q, err := g.quota(ctx, tenant)
	switch {
	case errors.Is(err, ErrNoQuota):
		// The tenant's quota is gone: no cap and no rate hold its parked
		// tasks back any more.
		q = Quota{Limit: 1 << 30, Window: time.Millisecond}
	case err != nil:
		return Depth{}, err
	}
	keys := []string{logKey(g.opts.prefix, tenant), permitsKey(g.opts.prefix, tenant),
		parkedKey(g.opts.prefix, tenant), dueKey(g.opts.prefix, tenant), notBeforeKey(g.opts.prefix, tenant)}
	s := "0"
	if scan {
		s = "1"
	}
	// Granularity 1µs: a granted task is moved into its queue by a timer
	// at its slot, not by asynq's whole-second schedule.
	args := []any{q.Limit, q.Window.Microseconds(), 1, q.MaxInFlight, g.waitLease().Microseconds(), member, maxGrants, s, dueGrace.Microseconds()}
	var res []any
	err = p.call(ctx, op, tenant, func(ctx context.Context) (err error) {
		res, err = g.depth.release.Run(ctx, g.rdb, keys, args...).Slice()
		return err
	})
	if err != nil {
		return Depth{}, err
	}
	return parseDepth(tenant, res, scan)
}

// parseDepth reads release.lua's reply.
func parseDepth(tenant string, res []any, scan bool) (Depth, error) {
	r := reply{v: res}
	d := Depth{Tenant: tenant, Now: time.UnixMicro(r.int()), InFlight: int(r.int()), Parked: int(r.int())}
	if o := r.int(); o > 0 {
		d.OldestParked = time.UnixMicro(o)
	}
	for n := r.int(); n > 0 && r.err == nil; n-- {
		d.Grants = append(d.Grants, Grant{Tenant: tenant, Ref: r.ref(), At: time.UnixMicro(r.int()), Parked: time.UnixMicro(r.int()), Now: d.Now})
	}
	if scan {
		for n := r.int(); n > 0 && r.err == nil; n-- {
			d.Lapsed = append(d.Lapsed, r.ref())
		}
		for n := r.int(); n > 0 && r.err == nil; n-- {
			d.Due = append(d.Due, Grant{Tenant: tenant, Ref: r.ref(), At: time.UnixMicro(r.int()), Now: d.Now})
		}
	}
	if r.err != nil {
		return Depth{}, r.err
	}
	return d, nil
}

// reply reads a script's mixed reply in order; the first problem sticks.
type reply struct {
	v   []any
	i   int
	err error
}

func (r *reply) next() any {
	if r.err != nil {
		return nil
	}
	if r.i >= len(r.v) {
		r.err = fmt.Errorf("admitq: release script reply is short: %d values", len(r.v))
		return nil
	}
	r.i++
	return r.v[r.i-1]
}

func (r *reply) int() int64 {
	v, ok := r.next().(int64)
	if !ok && r.err == nil {
		r.err = fmt.Errorf("admitq: release script reply: value %d is not an integer", r.i)
	}
	return v
}

func (r *reply) ref() Ref {
	s, ok := r.next().(string)
	if !ok {
		if r.err == nil {
			r.err = fmt.Errorf("admitq: release script reply: value %d is not a ref", r.i)
		}
		return Ref{}
	}
	ref, err := parseRef(s)
	if err != nil && r.err == nil {
		r.err = err
	}
	return ref
}

// Hold takes or renews the permit of ref, a task of tenant that a worker
// is running, for lease from now on Redis's clock. A running task with no
// permit takes one even over the cap: it is in flight whatever the count
// says, so the count must say so (this happens to a task retried after its
// worker died and its lease lapsed, and to one enqueued before the cap).
func (p *Permits) Hold(ctx context.Context, tenant string, ref Ref, lease time.Duration) error {
	return p.lease(ctx, "hold", tenant, ref, lease)
}

// WaitLease is the lease of a permit whose task waits in a queue (see
// WithPermitLease).
func (p *Permits) WaitLease() time.Duration { return p.g.waitLease() }

// Renew extends the permit of ref for lease from now, and does nothing
// when ref holds none: a reconciler that has found the task still waiting
// in its queue must not bring back a permit someone gave back meanwhile.
func (p *Permits) Renew(ctx context.Context, tenant string, ref Ref, lease time.Duration) error {
	return p.lease(ctx, "renew", tenant, ref, lease)
}

func (p *Permits) lease(ctx context.Context, mode, tenant string, ref Ref, lease time.Duration) error {
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	g := p.g
	return p.call(ctx, mode, tenant, func(ctx context.Context) error {
		return g.depth.lease.Run(ctx, g.rdb, []string{permitsKey(g.opts.prefix, tenant)}, ref.member(), lease.Microseconds(), mode).Err()
	})
}

// Started acknowledges a grant: its task is in its queue.
func (p *Permits) Started(ctx context.Context, tenant string, ref Ref) error {
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	g := p.g
	return p.call(ctx, "started", tenant, func(ctx context.Context) error {
		return g.rdb.ZRem(ctx, dueKey(g.opts.prefix, tenant), ref.member()).Err()
	})
}

// Postpone moves a grant's due time to at: its task could not be moved
// into the queue yet (its producer may still be writing it).
func (p *Permits) Postpone(ctx context.Context, tenant string, ref Ref, at time.Time) error {
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	g := p.g
	return p.call(ctx, "postpone", tenant, func(ctx context.Context) error {
		return g.rdb.ZAddXX(ctx, dueKey(g.opts.prefix, tenant), redisZ(at, ref)).Err()
	})
}

// Tenants lists the tenants that may hold permits or parked tasks.
func (p *Permits) Tenants(ctx context.Context) ([]string, error) {
	g := p.g
	var ts []string
	err := p.call(ctx, "tenants", "", func(ctx context.Context) (err error) {
		ts, err = g.rdb.SMembers(ctx, depthKey(g.opts.prefix)).Result()
		return err
	})
	if err != nil {
		// The call may still be running, and writing ts, after a timeout.
		return nil, err
	}
	return ts, nil
}

// Forget drops tenant from Tenants when it holds no permit and has nothing
// parked or due. It checks again after dropping it and puts it back if an
// enqueue raced in, so no tenant with parked tasks is ever left out.
func (p *Permits) Forget(ctx context.Context, tenant string) error {
	g := p.g
	keys := []string{permitsKey(g.opts.prefix, tenant), parkedKey(g.opts.prefix, tenant), dueKey(g.opts.prefix, tenant)}
	return p.call(ctx, "forget", tenant, func(ctx context.Context) error {
		if n, err := g.rdb.Exists(ctx, keys...).Result(); err != nil || n > 0 {
			return err
		}
		if err := g.rdb.SRem(ctx, depthKey(g.opts.prefix), tenant).Err(); err != nil {
			return err
		}
		n, err := g.rdb.Exists(ctx, keys...).Result()
		if err == nil && n > 0 {
			err = g.rdb.SAdd(ctx, depthKey(g.opts.prefix), tenant).Err()
		}
		return err
	})
}

// Quota returns tenant's quota, from the gate's quota source.
func (p *Permits) Quota(ctx context.Context, tenant string) (Quota, error) {
	return p.g.quota(ctx, tenant)
}

// call runs one Redis call under the gate's timeout.
func (p *Permits) call(ctx context.Context, op, tenant string, f func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, p.g.opts.timeout)
	defer cancel()
	if err := bounded(cctx, f); err != nil {
		return callError(ctx, op, tenant, err)
	}
	return nil
}

func redisZ(at time.Time, ref Ref) redis.Z {
	return redis.Z{Score: float64(at.UnixMicro()), Member: ref.member()}
}
