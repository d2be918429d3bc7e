package bench

import (
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
)

// Prefix starts every key the bench writes, apart from the two families it
// cannot name: redis_rate's ("rate:" + Prefix + ...) and asynq's queue
// (asynq:{admitq-bench}:...). The bench removes exactly these, with SCAN
// and UNLINK, before and after it runs; nothing else on the server is read
// or written.
const Prefix = "admitq-bench"

// queue is the asynq queue the enqueue contenders write to.
const queue = "admitq-bench"

// ownedPatterns are the SCAN patterns of every key the bench may write.
var ownedPatterns = []string{Prefix + ":*", "rate:" + Prefix + ":*", "asynq:{" + queue + "}:*"}

// floodTenant is the one tenant of the flood scenario.
const floodTenant = "flood"

// env is what a contender is built from.
type env struct {
	rdb     redis.UniversalClient // the contender's own client; closed after the run
	prefix  string                // Prefix:id, for its keys
	quota   admission.Quota
	timeout time.Duration // the gate's per-call deadline
}

// contender is one row of the report.
type contender struct {
	id, name string
	// flood: one tenant offered FloodFactor times its quota, paced, instead
	// of Concurrency callers in a closed loop over all tenants.
	flood bool
	// logKey names a tenant's sliding-window log, for bytes per entry; nil
	// for contenders that keep none.
	logKey func(prefix, tenant string) string
	build  func(e env) Limiter
}

func gateLogKey(prefix, tenant string) string { return prefix + ":{" + tenant + "}:log" }

func zsetKey(prefix, tenant string) string { return prefix + ":{" + tenant + "}" }

func newGate(e env, opts ...admission.Option) *admission.Gate {
	opts = append([]admission.Option{admission.WithPrefix(e.prefix), admission.WithTimeout(e.timeout)}, opts...)
	return admission.New(e.rdb, admission.StaticQuotas{Default: &e.quota}, opts...)
}

// contenders returns every row the bench knows, in report order. The gate
// (batched) comes first: the ratios are taken against it.
func contenders() []contender {
	return []contender{
		{
			id: "gate-batched", name: "gate (batched)", logKey: gateLogKey,
			build: func(e env) Limiter { return gateLimiter{newGate(e)} },
		},
		{
			id: "gate-unbatched", name: "gate (unbatched)", logKey: gateLogKey,
			build: func(e env) Limiter { return gateLimiter{newGate(e, admission.WithBatching(false))} },
		},
		{
			// The gate in Counter mode (counter.lua, bucketed counts instead
			// of a log): the same tenants, limit and callers, one script
			// call per tenant in each pipeline where Log mode shares one.
			id: "gate-counter", name: "gate, Counter mode",
			build: func(e env) Limiter {
				e.quota.Mode, e.quota.MaxInFlight = admission.Counter, 0
				return gateLimiter{newGate(e)}
			},
		},
		{
			id: "tx-pipeline", name: "tx-pipeline zset (notes)", logKey: zsetKey,
			build: func(e env) Limiter {
				return &txPipeline{rdb: e.rdb, prefix: e.prefix, limit: int64(e.quota.Limit), window: e.quota.Window, process: processID()}
			},
		},
		{
			id: "plain-lua", name: "plain Lua zset (notes)", logKey: zsetKey,
			build: func(e env) Limiter {
				return &plainLua{rdb: e.rdb, script: redis.NewScript(plainLuaSrc), prefix: e.prefix,
					limit: e.quota.Limit, window: e.quota.Window.Milliseconds(), process: processID()}
			},
		},
		{
			id: "fixed-window", name: "fixed-window counter",
			build: func(e env) Limiter {
				return &fixedWindow{rdb: e.rdb, prefix: e.prefix, limit: int64(e.quota.Limit), window: e.quota.Window}
			},
		},
		{
			id: "redis-rate", name: "go-redis/redis_rate",
			build: func(e env) Limiter {
				return &redisRate{lim: redis_rate.NewLimiter(e.rdb), prefix: e.prefix,
					limit: redis_rate.Limit{Rate: e.quota.Limit, Burst: e.quota.Limit, Period: e.quota.Window}}
			},
		},
		{
			id: "asynq", name: "asynq Enqueue (bare)",
			build: func(e env) Limiter {
				return &bareAsynq{c: asynq.NewClientFromRedisClient(e.rdb), queue: queue}
			},
		},
		{
			id: "enqueue", name: "enqueue.Client.Enqueue", logKey: gateLogKey,
			build: func(e env) Limiter {
				g := newGate(e)
				return &enqueueClient{c: enqueue.NewFromRedis(e.rdb, g), gate: g, queue: queue}
			},
		},
		{
			id: "gate-flood", name: "gate flood (1 tenant)", flood: true, logKey: gateLogKey,
			build: func(e env) Limiter { return gateLimiter{newGate(e)} },
		},
	}
}

// Contenders returns the IDs of the rows Run measures, in order, for
// Config.Only.
func Contenders() []string {
	var ids []string
	for _, c := range contenders() {
		ids = append(ids, c.id)
	}
	return ids
}
