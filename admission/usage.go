package admission

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// UsageResult is one tenant's answer from UsageBatch: its usage, or the
// error that kept it.
type UsageResult struct {
	Usage Usage
	Err   error
}

// Bulk usage reads: script calls per pipeline, and pipelines in flight at
// once. A pipeline of 500 usage calls costs Redis a few milliseconds; two
// in flight keep Redis busy while the client reads the last reply.
const (
	usagePipeline = 500
	usageFlight   = 2
)

// UsageBatch reports each tenant's usage, like Usage, in order, with the
// script calls pipelined: a few hundred per round trip, each round trip
// under the per-call timeout (WithTimeout, but a second at least) and the
// whole under the bulk timeout (WithBulkTimeout). On a cluster go-redis splits each pipeline
// per master, so it works there unchanged.
//
// A tenant that cannot be read gets its own error (ErrInvalidTenant,
// ErrNoQuota, ErrInvalidQuota, or the failed call's) and the others are
// still read; once ctx or the bulk timeout ends, every tenant not yet read
// gets that error. With a RedisQuotas, the quotas of tenants it has not
// cached are read a thousand per round trip too.
func (g *Gate) UsageBatch(ctx context.Context, tenants []string) []UsageResult {
	res := make([]UsageResult, len(tenants))
	if notMade(g, res) {
		return res
	}
	bctx, cancel := context.WithTimeoutCause(ctx, g.opts.bulkTimeout, errBulkTimeout(g.opts.bulkTimeout))
	defer cancel()

	quotas, qerrs := g.quotaBatch(bctx, tenants)
	var todo []int // indexes of the tenants with a quota, to read
	for i, tenant := range tenants {
		res[i].Usage.Tenant = tenant
		switch {
		case qerrs[i] != nil:
			res[i].Err = qerrs[i]
		case quotas[i].Unlimited():
			res[i].Usage = unlimitedUsage(tenant, quotas[i])
		default:
			res[i].Usage.Quota = quotas[i]
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return res
	}

	g.readUsage(ctx, bctx, res, todo)
	return res
}

// readUsage reads the usage of res[i] for each i in idx, whose Tenant and
// Quota are set: pipelines of usagePipeline calls, usageFlight at once.
func (g *Gate) readUsage(ctx, bctx context.Context, res []UsageResult, idx []int) {
	inParallel(slices.Collect(slices.Chunk(idx, usagePipeline)), func(chunk []int) {
		g.usagePipeline(ctx, bctx, res, chunk)
	})
}

// fullerFirst orders tenants (indexes of res) by held over limit, then by
// held, fullest first; failures last; ties by index.
func fullerFirst(res []UsageResult, held []int) func(i, j int) int {
	return func(i, j int) int {
		if fi, fj := res[i].Err != nil, res[j].Err != nil; fi != fj {
			if fi {
				return 1 // failures last
			}
			return -1
		}
		if res[i].Err == nil {
			// held[i]/limit[i] against held[j]/limit[j], in integers.
			// A tenant without a rate limit holds nothing: as 0 of 1.
			li, lj := int64(max(res[i].Usage.Quota.Limit, 1)), int64(max(res[j].Usage.Quota.Limit, 1))
			if c := cmp.Compare(int64(held[j])*li, int64(held[i])*lj); c != 0 {
				return c
			}
			if c := cmp.Compare(held[j], held[i]); c != 0 {
				return c
			}
		}
		return cmp.Compare(i, j)
	}
}

// inParallel calls f with each chunk, usageFlight at a time.
func inParallel(chunks [][]int, f func([]int)) {
	next := make(chan []int)
	var wg sync.WaitGroup
	for range min(usageFlight, len(chunks)) {
		wg.Go(func() {
			for chunk := range next {
				f(chunk)
			}
		})
	}
	for _, chunk := range chunks {
		next <- chunk
	}
	close(next)
	wg.Wait()
}

// UsageTop returns the usage of the n tenants, of tenants, that hold the
// largest share of their limits (in the window and ahead), fullest first,
// then by that count, then in the order given; n <= 0 means all of them.
// Tenants that cannot be read come after them, each with its error, as in
// UsageBatch.
//
// It costs Redis far less than UsageBatch of every tenant: one ZCOUNT per
// tenant in Log mode ranks them, against a server time read once, and
// only the n it returns are read in full. Like UsageBatch it works on a
// cluster, and runs under the bulk timeout.
func (g *Gate) UsageTop(ctx context.Context, tenants []string, n int) []UsageResult {
	res := make([]UsageResult, len(tenants))
	if notMade(g, res) {
		return res
	}
	bctx, cancel := context.WithTimeoutCause(ctx, g.opts.bulkTimeout, errBulkTimeout(g.opts.bulkTimeout))
	defer cancel()
	quotas, qerrs := g.quotaBatch(bctx, tenants)
	var logs, counters []int // tenants to rank, by mode
	for i, tenant := range tenants {
		res[i].Usage.Tenant, res[i].Usage.Quota, res[i].Err = tenant, quotas[i], qerrs[i]
		switch {
		case qerrs[i] != nil:
		case quotas[i].Unlimited():
			res[i].Usage = unlimitedUsage(tenant, quotas[i]) // holds nothing, and is not read
		case quotas[i].Mode == Counter:
			counters = append(counters, i)
		default:
			logs = append(logs, i)
		}
	}
	// Counter mode keeps no log to count: its usage call is its ranking.
	g.readUsage(ctx, bctx, res, counters)
	held := make([]int, len(tenants)) // in the window and ahead
	for _, i := range counters {
		held[i] = res[i].Usage.InWindow + res[i].Usage.Reserved
	}
	if len(logs) > 0 {
		g.rankLogs(ctx, bctx, res, held, logs)
	}

	order := make([]int, len(tenants))
	for i := range order {
		order[i] = i
	}
	fuller := fullerFirst(res, held)
	slices.SortFunc(order, fuller)
	if n <= 0 || n > len(order) {
		n = len(order)
	}
	// Read the chosen ones in full, then put them in order again: their
	// counts may have moved since the ranking.
	var full []int
	for _, i := range order[:n] {
		if q := res[i].Usage.Quota; res[i].Err == nil && q.Mode != Counter && !q.Unlimited() {
			full = append(full, i)
		}
	}
	g.readUsage(ctx, bctx, res, full)
	for _, i := range full {
		held[i] = res[i].Usage.InWindow + res[i].Usage.Reserved
	}
	top := slices.Clone(order[:n])
	for _, i := range order[n:] {
		if res[i].Err != nil {
			top = append(top, i)
		}
	}
	slices.SortFunc(top, fuller)
	out := make([]UsageResult, len(top))
	for k, i := range top {
		out[k] = res[i]
	}
	return out
}

// rankLogs counts, for res[i] with i in idx (Log mode), the entries in the
// window and ahead, into held[i]: a pipeline of ZCOUNTs per thousand,
// against one server time. A tenant whose count fails gets the error.
func (g *Gate) rankLogs(ctx, bctx context.Context, res []UsageResult, held []int, idx []int) {
	var now time.Time
	err := bulkCall(bctx, g.opts.pageTimeout(), func(ctx context.Context) (err error) {
		now, err = g.rdb.Time(ctx).Result()
		return err
	})
	if err != nil {
		err = bulkError(ctx, bctx, "usage: server time", err)
		for _, i := range idx {
			res[i].Err = err
		}
		return
	}
	nowUs := now.UnixMicro()
	inParallel(slices.Collect(slices.Chunk(idx, maxResolveBatch)), func(chunk []int) {
		var counts []int64 // set by the call; read only once it has returned
		var errs []error
		err := bulkCall(bctx, g.opts.pageTimeout(), func(ctx context.Context) error {
			pipe := g.rdb.Pipeline()
			cmds := make([]*redis.IntCmd, len(chunk))
			for j, i := range chunk {
				u := &res[i].Usage
				from := "(" + strconv.FormatInt(nowUs-u.Quota.Window.Microseconds(), 10)
				cmds[j] = pipe.ZCount(ctx, logKey(g.opts.prefix, u.Tenant), from, "+inf")
			}
			_, _ = pipe.Exec(ctx) // errors are read per command
			c, e := make([]int64, len(chunk)), make([]error, len(chunk))
			for j, cmd := range cmds {
				c[j], e[j] = cmd.Result()
			}
			counts, errs = c, e
			return nil
		})
		for j, i := range chunk {
			switch {
			case err != nil:
				res[i].Err = bulkError(ctx, bctx, fmt.Sprintf("usage %q", res[i].Usage.Tenant), err)
			case errs[j] != nil:
				g.fillUsage(ctx, bctx, &res[i], nil, errs[j])
			default:
				held[i] = int(counts[j])
			}
		}
	})
}

// quotaBatch looks each tenant's quota up, and validates it.
func (g *Gate) quotaBatch(ctx context.Context, tenants []string) ([]Quota, []error) {
	qs, errs := make([]Quota, len(tenants)), make([]error, len(tenants))
	var lookup []int // valid tenants
	for i, tenant := range tenants {
		if errs[i] = ValidateTenant(tenant); errs[i] == nil {
			lookup = append(lookup, i)
		}
	}
	if rq, ok := g.quotas.(*RedisQuotas); ok {
		names := make([]string, len(lookup))
		for j, i := range lookup {
			names[j] = tenants[i]
		}
		got, gerrs := rq.quotaBatch(ctx, names)
		for j, i := range lookup {
			qs[i], errs[i] = got[j], gerrs[j]
		}
	} else {
		for _, i := range lookup {
			qs[i], errs[i] = g.quotas.Quota(ctx, tenants[i])
		}
	}
	for _, i := range lookup {
		if errs[i] == nil {
			if err := qs[i].Validate(); err != nil {
				errs[i] = fmt.Errorf("tenant %q: %w", tenants[i], err)
			}
		}
	}
	return qs, errs
}

// usagePipeline reads the usage of res[i] for each i in idx, in one
// pipeline; calls that found the script missing (a Redis restarted or
// flushed) are sent again by EVAL, which also loads it.
func (g *Gate) usagePipeline(ctx, bctx context.Context, res []UsageResult, idx []int) {
	if bctx.Err() != nil {
		err := bulkError(ctx, bctx, "usage", bctx.Err())
		for _, i := range idx {
			res[i].Err = err
		}
		return
	}
	replies, errs := g.usageExec(bctx, res, idx, false)
	var retry []int
	for j, i := range idx {
		if isNoScript(errs[j]) {
			retry = append(retry, i)
			continue
		}
		g.fillUsage(ctx, bctx, &res[i], replies[j], errs[j])
	}
	if len(retry) > 0 {
		replies, errs = g.usageExec(bctx, res, retry, true)
		for j, i := range retry {
			g.fillUsage(ctx, bctx, &res[i], replies[j], errs[j])
		}
	}
}

// usageExec sends the usage calls of res[i] for each i in idx as one
// pipeline, by EVALSHA, or by EVAL when eval is set.
func (g *Gate) usageExec(bctx context.Context, res []UsageResult, idx []int, eval bool) ([][]int64, []error) {
	type replies struct {
		vals [][]int64
		errs []error
	}
	var out replies // set by the call; read only once it has returned
	err := bulkCall(bctx, g.opts.pageTimeout(), func(ctx context.Context) error {
		pipe := g.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(idx))
		for j, i := range idx {
			u := &res[i].Usage
			script, args := g.usage, []any{u.Quota.Limit, u.Quota.Window.Microseconds()}
			if u.Quota.Mode == Counter {
				script = g.counterUsage
			}
			keys := []string{windowKey(g.opts.prefix, u.Tenant, u.Quota)}
			if eval {
				cmds[j] = script.Eval(ctx, pipe, keys, args...)
			} else {
				cmds[j] = script.EvalSha(ctx, pipe, keys, args...)
			}
		}
		_, _ = pipe.Exec(ctx) // errors are read per command
		r := replies{vals: make([][]int64, len(idx)), errs: make([]error, len(idx))}
		for j, cmd := range cmds {
			r.vals[j], r.errs[j] = cmd.Int64Slice()
		}
		out = r
		return nil
	})
	if err != nil { // the pipeline did not come back in time
		errs := make([]error, len(idx))
		for j := range errs {
			errs[j] = err
		}
		return make([][]int64, len(idx)), errs
	}
	return out.vals, out.errs
}

// fillUsage fills r from its script reply, or sets its error.
func (g *Gate) fillUsage(ctx, bctx context.Context, r *UsageResult, reply []int64, err error) {
	switch {
	case err != nil && (bctx.Err() != nil || unavailable(err)):
		r.Err = bulkError(ctx, bctx, fmt.Sprintf("usage %q", r.Usage.Tenant), err)
	case err != nil:
		r.Err = fmt.Errorf("admitq: usage %q: %w", r.Usage.Tenant, err)
	case len(reply) != 4:
		r.Err = fmt.Errorf("admitq: usage script returned %d values", len(reply))
	default:
		u := &r.Usage
		u.Now = time.UnixMicro(reply[0])
		u.InWindow, u.Reserved = int(reply[1]), int(reply[2])
		u.NextFree = time.UnixMicro(reply[3])
	}
}

// quotaBatch looks tenants up like Quota, from the cache where it can,
// and reads the rest a thousand per round trip, caching them. An error
// from Redis is every unread tenant's error; a tenant not yet cached while
// Redis is unavailable gets ErrUnavailable, with no guess.
func (r *RedisQuotas) quotaBatch(ctx context.Context, tenants []string) ([]Quota, []error) {
	qs, errs := make([]Quota, len(tenants)), make([]error, len(tenants))
	var missing []int
	r.mu.Lock()
	for i, tenant := range tenants {
		if c, ok := r.tenants.cache.peek(tenant); ok {
			qs[i], errs[i] = c.q, c.err
		} else {
			missing = append(missing, i)
		}
	}
	r.mu.Unlock()
	for chunk := range slices.Chunk(missing, maxResolveBatch) {
		names := make([]string, len(chunk))
		for j, i := range chunk {
			names[j] = tenants[i]
		}
		now := time.Now()
		got, gerrs, err := r.resolveMany(ctx, &r.tenants, names)
		for j, i := range chunk {
			if err != nil {
				errs[i] = err
				continue
			}
			qs[i], errs[i] = got[j], gerrs[j]
			if errs[i] == nil || errors.Is(errs[i], ErrNoQuota) || errors.Is(errs[i], ErrInvalidQuota) {
				r.store(&r.tenants, names[j], qs[i], errs[i], now)
			}
		}
	}
	return qs, errs
}

// notMade gives each of res errNotMade and reports true for a Gate that
// New did not make.
func notMade(g *Gate, res []UsageResult) bool {
	err := g.made()
	if err == nil {
		return false
	}
	for i := range res {
		res[i].Err = err
	}
	return true
}
