package dispatch

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/dispatch/internal/rule"
)

// QueueStats is what the dispatcher holds for one queue.
type QueueStats struct {
	Queue string
	// Now is the Redis time of the reading.
	Now time.Time
	// Workers is how many live workers with a gate serve the queue, and
	// Concurrency their total: every one adds room to a fair queue.
	Workers, Concurrency int
	// Fair reports whether a live fair worker serves the queue.
	Fair bool
	// TenantsWaiting is how many tenants have tasks waiting, runnable,
	// held back (asleep) or waiting on keys (those counted up to
	// StatsTenants), besides paused ones; Tenants lists at most
	// StatsTenants of them, and at most StatsTenants paused ones.
	TenantsWaiting int
	// Ungated is how many live asynq servers process the queue without a
	// gate (plain asynq servers, or workers without worker.Config.Gate):
	// asynq's own count of the queue's servers less Workers. In a
	// dispatched queue they take tasks the dispatcher has no room for, so
	// they add no capacity to a fair queue.
	Ungated int
	// Tenants are the tenants with tasks waiting or in flight, by name:
	// at most StatsTenants of each (see Stats).
	Tenants []TenantStats
	// Keys are the queue's concurrency keys with tasks waiting or in
	// flight, by name, at most StatsKeys of them.
	Keys []KeyStats
}

// KeyStats is one concurrency key's part of a dispatched queue.
type KeyStats struct {
	Key string
	// InFlight is how many tasks carrying the key the dispatcher let in
	// that asynq still holds; Cap is the key's MaxInFlight (0: none), and
	// AtCap reports InFlight >= Cap > 0.
	InFlight, Cap int
	AtCap         bool
	// Waiting is how many tasks carrying the key wait their turn.
	Waiting int
	// Paused reports that the key's Quota.Paused holds its tasks; Held
	// that a downstream service's throttle (worker.ThrottledKey) holds
	// them until HeldUntil.
	Paused, Held bool
	HeldUntil    time.Time
}

// StatsKeys is how many keys Stats lists at most.
const StatsKeys = 100

// TenantStats is one tenant's part of a dispatched queue.
type TenantStats struct {
	Tenant string
	// Waiting is how many of its tasks wait their turn; OldestWaiting is
	// when the first of them was parked (zero when none waits).
	Waiting       int
	OldestWaiting time.Time
	// InFlight is how many of its tasks the dispatcher let in that asynq
	// still holds (pending, active, to be retried, or scheduled by the
	// gate for its rate's slot: each holds one of its places); Cap is its
	// MaxInFlight (0: none), and AtCap reports InFlight >= Cap > 0.
	InFlight, Cap int
	AtCap         bool
	// Paused reports that Quota.Paused holds its waiting tasks; Held that
	// they are held back for a while, by its rate or by a downstream
	// service's throttle (worker.Throttled).
	Paused, Held bool
	// Weight is its share under contention (1 by default).
	Weight float64
	// WorkerTime is the worker time its tasks ran since it last went idle,
	// and Share that time over the WorkerTime of every tenant listed.
	WorkerTime time.Duration
	Share      float64
}

// StatsTenants is how many waiting tenants Stats lists at most: the next
// to go in, then those held back soonest to wake.
const StatsTenants = 100

// StatsFlows is how many of a tenant's flows with a priority or keys Stats
// looks at for its oldest waiting task.
const StatsFlows = 16

// Stats reads queue's dispatch state: the tenants with tasks in flight
// (every one in a fair queue, whose room bounds them; in one that is not
// fair, at most StatsTenants of those with tasks among about 4,096 in
// flight), and the StatsTenants waiting tenants next in line.
// Its cost does not grow with how many tenants wait or have tasks in
// flight, or ever used the queue.
func (d *Dispatcher) Stats(ctx context.Context, queue string) (QueueStats, error) {
	qs, names, lapsed, err := d.readQueue(ctx, queue)
	if err != nil {
		return qs, err
	}
	if qs.Workers > 0 {
		n, err := d.servers(ctx, queue, qs.Now.Unix())
		if err != nil {
			return QueueStats{}, err
		}
		qs.Ungated = max(n-qs.Workers-lapsed, 0)
	}
	if qs.Keys, err = d.readKeys(ctx, queue); err != nil {
		return QueueStats{}, err
	}
	if len(names) == 0 {
		return qs, nil
	}
	qs.Tenants, err = d.readTenants(ctx, queue, names)
	if err != nil {
		return QueueStats{}, err
	}
	var total time.Duration
	for _, t := range qs.Tenants {
		total += t.WorkerTime
	}
	if total > 0 {
		for i := range qs.Tenants {
			qs.Tenants[i].Share = float64(qs.Tenants[i].WorkerTime) / float64(total)
		}
	}
	return qs, nil
}

// readQueue reads queue's workers and the names of its active tenants:
// those eligible, asleep, paused, waiting on keys, or with tasks in
// flight; and how many gate workers' records lapsed within
// asynqServerLinger, which asynq may still list as live servers.
func (d *Dispatcher) readQueue(ctx context.Context, queue string) (QueueStats, []string, int, error) {
	k := d.keysFor(queue)
	var now *redis.TimeCmd
	var vt, sleep, held, waitedOn *redis.StringSliceCmd
	var nvt, nsleep *redis.IntCmd
	var members *redis.ZSliceCmd
	var run *redis.ScanCmd
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		vt = p.ZRange(ctx, k.vt, 0, StatsTenants-1)
		sleep = p.ZRange(ctx, k.sleep, 0, StatsTenants-1)
		held = p.SRandMemberN(ctx, k.held, StatsTenants)
		waitedOn = p.ZRange(ctx, k.kw, 0, StatsKeys-1)
		nvt, nsleep = p.ZCard(ctx, k.vt), p.ZCard(ctx, k.sleep)
		// Every task in flight when a fair queue's room bounds them,
		// else about as many: a queue that is not fair may hold any
		// number (one HSCAN step).
		run = p.HScan(ctx, k.run, 0, "", statsRunEntries)
		members = p.ZRangeWithScores(ctx, k.workers, 0, -1)
		return nil
	})
	if err != nil {
		return QueueStats{}, nil, 0, fmt.Errorf("dispatch: reading queue %q: %w", queue, err)
	}
	qs := QueueStats{Queue: queue, Now: now.Val(), TenantsWaiting: int(nvt.Val() + nsleep.Val())}
	lapsed := 0
	for _, z := range members.Val() {
		w, ok := parseWorkerMember(z.Member.(string))
		live, _ := w.state(int64(z.Score), qs.Now.UnixMicro())
		switch {
		case ok && live:
			qs.Workers++
			qs.Fair = qs.Fair || w.fair
			qs.Concurrency += w.concurrency
		case ok && int64(z.Score)+asynqServerLinger.Microseconds() >= qs.Now.UnixMicro():
			lapsed++
		}
	}
	blocked, err := d.blockedTenants(ctx, k, waitedOn.Val())
	if err != nil {
		return QueueStats{}, nil, 0, fmt.Errorf("dispatch: reading queue %q: %w", queue, err)
	}
	names := append(vt.Val(), sleep.Val()...)
	listed := len(names)
	for _, T := range blocked {
		if !slices.Contains(names[:listed], T) {
			names = append(names, T)
			qs.TenantsWaiting++
		}
	}
	names = append(names[:min(len(names), StatsTenants)], held.Val()...)
	entries, _ := run.Val()
	inFlight := runTenants(nil, entries)
	slices.Sort(inFlight)
	inFlight = slices.Compact(inFlight)
	names = append(names, inFlight[:min(len(inFlight), StatsTenants)]...)
	slices.Sort(names)
	return qs, slices.Compact(names), lapsed, nil
}

// runTenants appends to out the tenant of each run entry among entries,
// an HSCAN step of the run hash (field, value, ...).
func runTenants(out, entries []string) []string {
	for i := 1; i < len(entries); i += 2 {
		if e, ok := parseRunEntry(entries[i]); ok {
			out = append(out, e.tenant)
		}
	}
	return out
}

// asynqServerLinger is how long asynq may list a server that stopped
// without a word (SIGKILL) as live: its record's TTL, twice its 5 s
// heartbeat. A gate worker's own record lapses sooner, so Stats does not
// count such a server as one without a gate meanwhile.
const asynqServerLinger = 10 * time.Second

// statsRunEntries is about how many tasks in flight Stats reads (one
// HSCAN step, which reads a small hash whole): all of a fair queue's (its
// room is its workers' concurrency and half as much again), and some of a
// larger number, of whose tenants it lists at most StatsTenants.
const statsRunEntries = 4096

// blockedTenants reads the tenants registered with keys (those whose
// every flow waits on a closed key), up to StatsTenants, each once.
func (d *Dispatcher) blockedTenants(ctx context.Context, k queueKeys, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.StringSliceCmd, len(keys))
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, K := range keys {
			cmds[i] = p.ZRange(ctx, k.blockedKey(K), 0, StatsTenants-1)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range cmds {
		out = append(out, c.Val()...)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	return out[:min(len(out), StatsTenants)], nil
}

// readTenants reads the named tenants' records and lines in queue.
func (d *Dispatcher) readTenants(ctx context.Context, queue string, names []string) ([]TenantStats, error) {
	k := d.keysFor(queue)
	hashes := make([]*redis.SliceCmd, len(names))
	lens := make([]*redis.IntCmd, len(names))
	heads := make([]*redis.StringCmd, len(names))
	flows := make([]*redis.StringSliceCmd, len(names))
	asleep := make([]*redis.FloatCmd, len(names))
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, t := range names {
			hashes[i] = p.HMGet(ctx, k.tenantKey(t), "n", "cap", "wm", "used", "paused", "wk")
			asleep[i] = p.ZScore(ctx, k.sleep, t)
			lens[i] = p.LLen(ctx, k.waitingKey(t))
			heads[i] = p.LIndex(ctx, k.waitingKey(t), 0)
			flows[i] = p.ZRange(ctx, k.flowsKey(t), 0, StatsFlows-1)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("dispatch: reading queue %q's tenants: %w", queue, err)
	}
	out := make([]TenantStats, len(names))
	for i, t := range names {
		h := hashes[i].Val()
		ts := TenantStats{Tenant: t, Waiting: int(lens[i].Val() + field(h, 5)), Weight: 1}
		n, cap, wm, used := field(h, 0), field(h, 1), field(h, 2), field(h, 3)
		ts.Paused, ts.Held = h[4] == "1", asleep[i].Err() == nil
		ts.InFlight, ts.Cap = int(n), int(cap)
		if wm > 0 {
			ts.Weight = float64(wm) / rule.WeightScale
		}
		ts.WorkerTime = time.Duration(used) * time.Microsecond
		ts.AtCap = ts.Cap > 0 && ts.InFlight >= ts.Cap
		if e, err := parseWaitingEntry(heads[i].Val()); err == nil {
			ts.OldestWaiting = time.UnixMicro(e.parked)
		}
		for _, m := range flows[i].Val() { // "<head's park µs>|<flow>"
			at, _, _ := strings.Cut(m, "|")
			if us, err := strconv.ParseInt(at, 10, 64); err == nil && (ts.OldestWaiting.IsZero() || us < ts.OldestWaiting.UnixMicro()) {
				ts.OldestWaiting = time.UnixMicro(us)
			}
		}
		out[i] = ts
	}
	return out, nil
}

// readKeys reads up to StatsKeys of queue's concurrency keys, by name.
func (d *Dispatcher) readKeys(ctx context.Context, queue string) ([]KeyStats, error) {
	k := d.keysFor(queue)
	names, err := d.rdb.SRandMemberN(ctx, k.keys, StatsKeys).Result()
	if err != nil {
		return nil, fmt.Errorf("dispatch: reading queue %q's keys: %w", queue, err)
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	hashes := make([]*redis.SliceCmd, len(names))
	held := make([]*redis.FloatCmd, len(names))
	_, err = d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, K := range names {
			hashes[i] = p.HMGet(ctx, k.keyKey(K), "n", "cap", "paused", "w")
			held[i] = p.ZScore(ctx, k.ksleep, K)
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("dispatch: reading queue %q's keys: %w", queue, err)
	}
	out := make([]KeyStats, len(names))
	for i, K := range names {
		h := hashes[i].Val()
		ks := KeyStats{Key: K, InFlight: int(field(h, 0)), Cap: int(field(h, 1)), Paused: h[2] == "1", Waiting: int(field(h, 3))}
		ks.AtCap = ks.Cap > 0 && ks.InFlight >= ks.Cap
		if us, err := held[i].Result(); err == nil {
			ks.Held, ks.HeldUntil = true, time.UnixMicro(int64(us))
		}
		out[i] = ks
	}
	return out, nil
}

// field reads the i-th value of an HMGET of a tenant's record as a whole
// number, 0 when missing (an old record may hold a float).
func field(h []any, i int) int64 {
	s, _ := h[i].(string)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return int64(f)
}

// Queues lists the asynq queues that the dispatcher has state for: a
// worker with a gate serves them, or tasks wait or run there.
func (d *Dispatcher) Queues(ctx context.Context) ([]string, error) {
	all, err := d.rdb.SMembers(ctx, "asynq:queues").Result()
	if err != nil {
		return nil, fmt.Errorf("dispatch: listing asynq's queues: %w", err)
	}
	cmds := make([]*redis.IntCmd, len(all))
	// Each command's error is read below.
	_, _ = d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range all {
			k := d.keysFor(q) // workers, vt, sleep, run: one slot
			cmds[i] = p.Exists(ctx, k.workers, k.vt, k.sleep, k.run)
		}
		return nil
	})
	var qs []string
	for i, q := range all {
		switch err := cmds[i].Err(); {
		case err != nil && strings.HasPrefix(err.Error(), "CROSSSLOT"):
			// A name with a brace, whose keys cannot share a slot on a
			// cluster (asynq lists it, though its writes failed): never
			// dispatched, and no reason to fail the others.
		case err != nil:
			return nil, fmt.Errorf("dispatch: listing queues: %w", err)
		case cmds[i].Val() > 0:
			qs = append(qs, q)
		}
	}
	slices.Sort(qs)
	return qs, nil
}
