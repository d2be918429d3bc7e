package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch/internal/rule"
	"github.com/admitq/admitq/internal/bounded"
	"github.com/admitq/admitq/internal/rediserr"
	"github.com/admitq/admitq/lua"
)

// ParkedUntil is the asynq.ProcessAt of a waiting task. asynq keeps it in
// its scheduled set, as durably as any task and visible to its tools, and
// it never comes due on its own: the dispatcher moves it in at its turn.
var ParkedUntil = time.Date(9999, time.January, 1, 0, 0, 0, 0, time.UTC)

// Grace is how long a grant may wait for its mover, and a task that went
// straight in for its producer's write, before a repair pass judges them.
const Grace = 5 * time.Second

// modeTTL is how long a producer trusts what it read of a queue's workers.
const modeTTL = time.Second

// Dispatcher routes tasks through dispatched queues for producers and runs
// the dispatch for workers (Serve). It is safe for concurrent use. Make
// one with New.
type Dispatcher struct {
	rdb     redis.UniversalClient
	parkVia redis.UniversalClient // Park's calls, when set (ParkVia)
	gate    *admission.Gate
	log     *slog.Logger
	scripts *scripts

	mu    sync.Mutex
	modes map[string]mode
	told  map[string]bool // queues whose capped tenants went direct, logged once

	failover failover // the cluster layout reloads it asked for (failover.go)
}

type scripts struct {
	park, dispatch, move, repair, adopt lua.FairScript
	lock                                *redis.Script
	// plain is set once the server refused a shebang (miniredis does):
	// the scripts then run without one.
	plain atomic.Bool
	// evalOnly is set once the server could not serve the functions
	// library (no FUNCTION or FCALL, before Redis 7, or an ACL that
	// forbids them): the scripts then run with EVALSHA.
	evalOnly atomic.Bool
}

// mode is what a producer last read of a queue's workers.
type mode struct {
	served, fair bool
	read         time.Time
	// err is the read's failure, answered again for the gate's WithTimeout
	// (a producer's Enqueue looks twice: it waits once on a stalled Redis).
	err error
}

// New returns a Dispatcher for the queues on rdb, the Redis of both asynq
// and g. A nil log means slog.Default().
func New(rdb redis.UniversalClient, g *admission.Gate, log *slog.Logger) *Dispatcher {
	if log == nil {
		log = slog.Default()
	}
	return &Dispatcher{
		rdb: rdb, gate: g, log: log,
		scripts: &scripts{park: lua.FairPark(), dispatch: lua.FairDispatch(), move: lua.FairMove(), repair: lua.FairRepair(), adopt: lua.FairAdopt(), lock: lua.UniqueLock()},
		modes:   make(map[string]mode),
		told:    make(map[string]bool),
	}
}

// ParkVia makes Park send its call through c, a client of the same Redis
// that shares pipelines among concurrent callers (enqueue.NewFromRedis
// gives its own): concurrent producers' parks then go out together. The
// Dispatcher's other calls go through its own client. Call it before the
// Dispatcher is used.
func (d *Dispatcher) ParkVia(c redis.UniversalClient) { d.parkVia = c }

// queueKeys are a queue's keys, named as fair.lua's header names them.
type queueKeys struct {
	prefix                            string // the dispatcher's key prefix for the queue
	taskPrefix                        string // asynq's task key prefix for the queue
	vt, sleep, run, meta, workers     string
	pending, active, scheduled        string
	grants, limbo, fresh, debts, held string
	deadlines, archived               string
	keys, ksleep, kw, kheld           string
}

func (d *Dispatcher) keysFor(queue string) queueKeys {
	p := d.gate.Prefix() + ":fair:{" + queue + "}:"
	a := "asynq:{" + queue + "}:"
	return queueKeys{
		prefix: p, taskPrefix: a + "t:",
		vt: p + "vt", sleep: p + "sleep", run: p + "run", meta: p + "meta", workers: p + "workers",
		pending: a + "pending", active: a + "active", scheduled: a + "scheduled",
		grants: p + "grants", limbo: p + "limbo", fresh: p + "fresh", debts: p + "debts", held: p + "held",
		deadlines: p + "deadlines", archived: a + "archived",
		keys: p + "keys", ksleep: p + "ksleep", kw: p + "kw", kheld: p + "kheld",
	}
}

// scriptKeys are k in the order of fair.lua's KEYS.
func (k queueKeys) scriptKeys() []string {
	return []string{k.vt, k.sleep, k.run, k.meta, k.workers, k.pending, k.active, k.scheduled,
		k.grants, k.limbo, k.fresh, k.debts, k.held, k.deadlines, k.archived, k.keys, k.ksleep, k.kw, k.kheld}
}

// tenantKey is tenant's record in the queue, waitingKey its line.
func (k queueKeys) tenantKey(tenant string) string  { return k.prefix + "t:" + tenant }
func (k queueKeys) waitingKey(tenant string) string { return k.prefix + "w:" + tenant }

// flowKey is the line of tenant's flow f other than "0" (see fair.lua);
// flowsKey the set of those flows; keyKey key's record; blockedKey the
// tenants registered with key.
func (k queueKeys) flowKey(tenant, f string) string {
	if f == "0" {
		return k.waitingKey(tenant)
	}
	return k.prefix + "w:" + tenant + "\n" + f
}
func (k queueKeys) flowsKey(tenant string) string { return k.prefix + "f:" + tenant }
func (k queueKeys) keyKey(key string) string      { return k.prefix + "k:" + key }
func (k queueKeys) blockedKey(key string) string  { return k.prefix + "kb:" + key }

// run calls script s on queue's keys with its own args after the two the
// prelude takes: as a function of the dispatcher's library (loaded on the
// queue's node when Redis does not know it: a restart from an older
// snapshot, a new version), or as a script on a server without functions.
func (d *Dispatcher) run(ctx context.Context, s lua.FairScript, queue string, args ...any) ([]any, error) {
	k := d.keysFor(queue)
	keys := k.scriptKeys()
	args = append([]any{k.prefix, k.taskPrefix}, args...)
	res, err := d.fcall(ctx, s, keys, args)
	if errors.Is(err, errNoFunctions) {
		res, err = d.eval(ctx, s, keys, args)
	}
	if err != nil {
		return nil, fmt.Errorf("dispatch: queue %q: %w", queue, d.recoverFrom(err))
	}
	return res, nil
}

// errNoFunctions: the server cannot serve the library; use EVALSHA.
var errNoFunctions = errors.New("dispatch: no Redis functions")

// fcall calls s's function, loading the library once if Redis lacks it.
func (d *Dispatcher) fcall(ctx context.Context, s lua.FairScript, keys []string, args []any) ([]any, error) {
	if d.scripts.evalOnly.Load() {
		return nil, errNoFunctions
	}
	via := d.via(s)
	for loaded := false; ; loaded = true {
		res, err := via.FCall(ctx, s.Function, keys, args...).Slice()
		switch {
		case err == nil:
			return res, nil
		case isUnknownCommand(err):
			d.scripts.evalOnly.Store(true)
			return nil, errNoFunctions
		case loaded || !strings.Contains(strings.ToLower(err.Error()), "function not found"):
			return nil, err
		}
		if err := d.loadLibrary(ctx, keys[0]); err != nil {
			if rediserr.Classify(err) != rediserr.Reply {
				return nil, err // down, busy, out of memory: not a refusal
			}
			d.log.Warn("admitq: loading the dispatcher's functions failed; its scripts run with EVALSHA", "err", err)
			d.scripts.evalOnly.Store(true)
			return nil, errNoFunctions
		}
	}
}

// loadLibrary loads the dispatcher's library on the node that holds key.
func (d *Dispatcher) loadLibrary(ctx context.Context, key string) error {
	var node redis.Cmdable = d.rdb
	if c, ok := d.rdb.(*redis.ClusterClient); ok {
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		node = m
	}
	err := node.FunctionLoad(ctx, lua.FairLibrary()).Err()
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil // another worker or producer loaded it first
	}
	return err
}

// eval calls s as a script, without its shebang where the server refuses
// one.
func (d *Dispatcher) eval(ctx context.Context, s lua.FairScript, keys []string, args []any) ([]any, error) {
	if !d.scripts.plain.Load() {
		res, err := s.Flagged.Run(ctx, d.via(s), keys, args...).Slice()
		if err == nil || !strings.Contains(err.Error(), "near '#'") {
			return res, err
		}
		d.scripts.plain.Store(true)
	}
	return s.Plain.Run(ctx, d.via(s), keys, args...).Slice()
}

// via is the client that calls s: ParkVia's for the park, when set.
func (d *Dispatcher) via(s lua.FairScript) redis.UniversalClient {
	if d.parkVia != nil && s.Function == d.scripts.park.Function {
		return d.parkVia
	}
	return d.rdb
}

// isUnknownCommand reports whether Redis does not know a command (FCALL
// before Redis 7, or in miniredis).
func isUnknownCommand(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), "unknown command")
}

// Mode reports whether a worker with a gate serves queue or did within its
// restart grace (served), and whether one of them is fair, as read from
// Redis at most once a second. The read is bounded by the gate's
// WithTimeout, as the gate's own calls are, whatever the client: a stalled
// Redis fails a producer's Enqueue in that time. A read that failed (not
// for its caller's ctx) is answered again, failed, for that long.
func (d *Dispatcher) Mode(ctx context.Context, queue string) (served, fair bool, err error) {
	d.mu.Lock()
	m, ok := d.modes[queue]
	d.mu.Unlock()
	switch {
	case ok && m.err != nil && time.Since(m.read) < d.gate.Timeout():
		return false, false, m.err
	case ok && m.err == nil && time.Since(m.read) < modeTTL:
		return m.served, m.fair, nil
	}
	var members *redis.ZSliceCmd
	var now *redis.TimeCmd
	cctx, cancel := context.WithTimeout(ctx, d.gate.Timeout())
	defer cancel()
	err = bounded.Call(cctx, func(ctx context.Context) error {
		_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			now = p.Time(ctx)
			members = p.ZRangeWithScores(ctx, d.keysFor(queue).workers, 0, -1)
			return nil
		})
		return err
	})
	if err != nil {
		err = fmt.Errorf("dispatch: reading queue %q's workers: %w", queue, d.recoverFrom(err))
		if ctx.Err() == nil {
			d.mu.Lock()
			d.modes[queue] = mode{read: time.Now(), err: err}
			d.mu.Unlock()
		}
		return false, false, err
	}
	m = mode{read: time.Now()}
	for _, z := range members.Val() {
		w, ok := parseWorkerMember(z.Member.(string))
		if _, recent := w.state(int64(z.Score), now.Val().UnixMicro()); ok && recent {
			m.served = true
			m.fair = m.fair || w.fair
		}
	}
	d.mu.Lock()
	d.modes[queue] = m
	d.mu.Unlock()
	return m.served, m.fair, nil
}

// limitsOf is what q says of a tenant's place in a dispatched queue.
func limitsOf(q admission.Quota) rule.Limits {
	return rule.Limits{Cap: q.MaxInFlight, Weight: rule.Weight(q.EffectiveWeight()), Paused: q.Paused}
}

// runEntry is an entry of run, as fair.lua writes it:
// "<state>|<estimate µs>|<since µs>|<tenant>", then a newline and the
// task's flow unless that is "0".
type runEntry struct {
	state, tenant, flow string
	estimate, since     int64
}

// parseRunEntry reads s as a runEntry.
func parseRunEntry(s string) (runEntry, bool) {
	f := strings.SplitN(s, "|", 4)
	if len(f) != 4 {
		return runEntry{}, false
	}
	r := runEntry{state: f[0], tenant: f[3], flow: "0"}
	if T, flow, ok := strings.Cut(f[3], "\n"); ok {
		r.tenant, r.flow = T, flow
	}
	r.estimate, _ = strconv.ParseInt(f[1], 10, 64)
	r.since, _ = strconv.ParseInt(f[2], 10, 64)
	return r, true
}

// keyLimits reads key's limits from the gate's key quotas: a key without
// a quota has none.
func (d *Dispatcher) keyLimits(ctx context.Context, key string) (rule.KeyLimits, error) {
	q, ok, err := d.gate.KeyQuota(ctx, key)
	if err != nil || !ok {
		return rule.KeyLimits{}, err
	}
	return rule.KeyLimits{Cap: q.MaxInFlight, Paused: q.Paused}, nil
}

// flag is b as the scripts take it.
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// warnDirect logs once per queue that a task the dispatcher would hold (a
// capped or paused tenant's, or one with keys or a priority) went straight
// in because no worker with a gate serves the queue.
func (d *Dispatcher) warnDirect(queue, tenant string) {
	d.mu.Lock()
	told := d.told[queue]
	d.told[queue] = true
	d.mu.Unlock()
	if !told {
		d.log.Warn("admitq: no worker with a Gate serves this queue, so tasks go in uncapped: tenants' caps and pauses, keys and priorities hold nothing here; run its workers with worker.Config{Gate: g}",
			"queue", queue, "tenant", tenant)
	}
}

// micros is t in Unix µs, 0 for the zero time or any time before 1970 (a
// not-before time that has passed long ago).
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return max(t.UnixMicro(), 0)
}

// ErrInvalidPrefix is returned by Park, Serve and the other calls that
// write a queue's keys when the gate's prefix (admission.WithPrefix) holds
// a brace: the dispatcher's keys must hash on the queue's tag, {<queue>},
// beside asynq's, and a brace in the prefix would make an earlier tag.
var ErrInvalidPrefix = errors.New("dispatch: invalid prefix")

// checkPrefix refuses a gate prefix with a brace (ErrInvalidPrefix).
func (d *Dispatcher) checkPrefix() error {
	if strings.ContainsAny(d.gate.Prefix(), "{}") {
		return fmt.Errorf("%w: the gate's prefix %q has a brace; the dispatcher's keys must hash on the queue's {<queue>} tag, so use a prefix without braces", ErrInvalidPrefix, d.gate.Prefix())
	}
	return nil
}

// toInt reads an integer a script returned.
// toStr reads a script's reply value as text: a bulk string, or an
// integer (Lua numbers come back as integers).
func toStr(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	}
	return "", fmt.Errorf("dispatch: script returned %T, want a string", v)
}

func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("dispatch: script returned %q, want an integer", x)
		}
		return n, nil
	}
	return 0, fmt.Errorf("dispatch: script returned %T, want an integer", v)
}
