package admission

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/lua"
)

// Gate decides, per tenant, whether work is admitted now, deferred to a
// reserved slot or rejected, on a sliding-window log kept in Redis. Every
// decision is one atomic script call on Redis server time, so any number of
// Gates in any number of processes share one exact limit per tenant.
//
// A Gate is safe for concurrent use. Most callers want Admit, or AdmitID when
// they have an ID of their own to make retries idempotent.
type Gate struct {
	rdb    redis.UniversalClient
	quotas Quotas
	opts   options
	gran   int64 // deferral rounding, µs
	admit  *redis.Script
	usage  *redis.Script
	ids    *idGen
}

// New returns a Gate that keeps its logs in rdb and looks quotas up in
// quotas. rdb may be a plain, failover or cluster client; the caller owns it
// and closes it.
func New(rdb redis.UniversalClient, quotas Quotas, opts ...Option) *Gate {
	o := newOptions(opts)
	return &Gate{
		rdb:    rdb,
		quotas: quotas,
		opts:   o,
		gran:   o.granularity.Microseconds(),
		admit:  lua.Admit(),
		usage:  lua.Usage(),
		ids:    newIDGen(),
	}
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
	return g.AdmitID(ctx, tenant, g.ids.next())
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
	if err := ValidateTenant(tenant); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if id == "" {
			return nil, fmt.Errorf("%w: empty entry ID", ErrInvalidID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	q, err := g.quota(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return g.decide(ctx, tenant, q, ids)
}

// ErrInvalidID is returned for an empty entry ID.
var ErrInvalidID = errors.New("admitq: invalid entry ID")

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

func (g *Gate) decide(ctx context.Context, tenant string, q Quota, ids []string) ([]Decision, error) {
	args := appendAdmitArgs(make([]any, 0, 5+len(ids)), q, g.gran, ids)
	cctx, cancel := context.WithTimeout(ctx, g.opts.timeout)
	defer cancel()
	res, err := g.admit.Run(cctx, g.rdb, []string{logKey(g.opts.prefix, tenant)}, args...).Int64Slice()
	if err != nil {
		return nil, callError(ctx, "admit", tenant, err)
	}
	return parseDecisions(tenant, ids, res)
}

func appendAdmitArgs(args []any, q Quota, gran int64, ids []string) []any {
	args = append(args, q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), gran, len(ids))
	for _, id := range ids {
		args = append(args, id)
	}
	return args
}

// parseDecisions reads admit.lua's reply for one key: res[0] is now, then
// outcome, slot and remaining for each ID.
func parseDecisions(tenant string, ids []string, res []int64) ([]Decision, error) {
	if len(res) != 1+3*len(ids) {
		return nil, fmt.Errorf("admitq: admit script returned %d values for %d IDs", len(res), len(ids))
	}
	now := time.UnixMicro(res[0])
	ds := make([]Decision, len(ids))
	for i, id := range ids {
		code, at, remaining := res[1+3*i], res[2+3*i], res[3+3*i]
		d := Decision{Tenant: tenant, ID: id, Now: now, At: time.UnixMicro(at), Remaining: int(remaining)}
		switch code {
		case 0:
			d.Outcome = Admitted
		case 1:
			d.Outcome = Deferred
		case 2:
			d.Outcome, d.ID = Rejected, ""
		case 3:
			d.Outcome, d.Existing = Admitted, true
		case 4:
			d.Outcome, d.Existing = Deferred, true
		default:
			return nil, fmt.Errorf("admitq: admit script returned outcome %d", code)
		}
		ds[i] = d
	}
	return ds, nil
}

// Release gives back the slot a decision took, for work that was admitted
// but then not started (say, the enqueue after admission failed). It does
// nothing for a rejected or local decision, which took no slot in Redis.
func (g *Gate) Release(ctx context.Context, d Decision) error {
	if d.ID == "" || d.Local || d.Outcome == Rejected {
		return nil
	}
	if err := ValidateTenant(d.Tenant); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, g.opts.timeout)
	defer cancel()
	if err := g.rdb.ZRem(cctx, logKey(g.opts.prefix, d.Tenant), d.ID).Err(); err != nil {
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
	// InWindow is the number of slots in the window (Now-Window, Now].
	InWindow int
	// Reserved is the number of deferred slots after Now.
	Reserved int
	// NextFree is the slot a request arriving now would get (before
	// rounding); Now when it would be admitted.
	NextFree time.Time
}

// Usage reports tenant's current use of its quota. It writes nothing.
func (g *Gate) Usage(ctx context.Context, tenant string) (Usage, error) {
	if err := ValidateTenant(tenant); err != nil {
		return Usage{}, err
	}
	q, err := g.quota(ctx, tenant)
	if err != nil {
		return Usage{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.opts.timeout)
	defer cancel()
	res, err := g.usage.Run(cctx, g.rdb, []string{logKey(g.opts.prefix, tenant)}, q.Limit, q.Window.Microseconds()).Int64Slice()
	if err != nil {
		return Usage{}, callError(ctx, "usage", tenant, err)
	}
	if len(res) != 4 {
		return Usage{}, fmt.Errorf("admitq: usage script returned %d values", len(res))
	}
	return Usage{
		Tenant:   tenant,
		Quota:    q,
		Now:      time.UnixMicro(res[0]),
		InWindow: int(res[1]),
		Reserved: int(res[2]),
		NextFree: time.UnixMicro(res[3]),
	}, nil
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

// unavailable reports whether err means Redis could not serve the call now,
// as opposed to refusing it (a wrong key type, a script error).
func unavailable(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return true // network errors, timeouts, closed pools
	}
	for _, p := range []string{"LOADING", "READONLY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "BUSY"} {
		if strings.HasPrefix(rerr.Error(), p) {
			return true
		}
	}
	return false
}
