package bench

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// keysPerCall is the number of tenants the side-by-side benchmarks put in
// one script call: about what the batched gate sends at 64 callers.
const keysPerCall = 20

// contestant is one side of a side-by-side benchmark: a script, the key
// it keeps tenant i in, and, for a caller, a function that fills a call's
// ARGV for the keys of the call.
type contestant struct {
	name   string
	script *redis.Script
	key    func(tenant int) string
	args   func(r *rand.Rand) func(keys []string) []any
}

// otherScript returns the script in the file ADMITQ_BENCH_OTHER_SCRIPT
// names (from the module's root, unless absolute: see readScript), or src:
// a way to try a change to a script against the current one, as each of
// the scripts' costs was measured.
func otherScript(b *testing.B, src string) *redis.Script {
	if path := os.Getenv("ADMITQ_BENCH_OTHER_SCRIPT"); path != "" {
		src = readScript(b, path)
	}
	return redis.NewScript(src)
}

// admitLua returns admit.lua for a benchmark that names it, and skips b in
// a build that carries a floor in its place (lua.AdmitStandIn).
func admitLua(b *testing.B) *redis.Script {
	if s := lua.AdmitStandIn(); s != "" {
		b.Skipf("admit.lua is replaced by %s in this build", s)
	}
	return lua.Admit()
}

// readScript returns the script in the file at path, which, unless
// absolute, is taken from the module's root (go test runs a package's
// benchmarks in its own directory, two below it), as the README's
// commands name them: lua/floor/ttlfloor.lua.
func readScript(b *testing.B, path string) string {
	if !filepath.IsAbs(path) {
		path = filepath.Join("..", "..", path)
	}
	s, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return string(s)
}

// sideBySide runs two contestants, each on a redis-server of its own, with
// 64 callers whose calls alternate between the two, so both see the same
// machine at the same time. Each call decides keysPerCall of 1000 tenants,
// picked uniformly. The metrics end in -<name>; other÷base is the ratio of
// their script µs per decision.
func sideBySide(b *testing.B, base, other contestant) {
	const tenants, parallel = 1000, 64
	cs := []contestant{base, other}
	rdbs := make([]*redis.Client, len(cs))
	admins := make([]*redis.Client, len(cs))
	keys := make([][]string, len(cs))
	ctx := context.Background()
	for i, c := range cs {
		srv := redistest.Start(b)
		rdbs[i], admins[i] = benchClient(b, srv, parallel), srv.Client(b)
		if err := c.script.Load(ctx, rdbs[i]).Err(); err != nil {
			b.Fatal(err)
		}
		keys[i] = make([]string, tenants)
		for t := range keys[i] {
			keys[i][t] = c.key(t)
		}
	}
	before := make([]serverStats, len(cs))
	for i, admin := range admins {
		var err error
		if before[i], err = readStats(ctx, admin); err != nil {
			b.Fatal(err)
		}
	}
	var seed atomic.Uint64
	calls := make([]atomic.Int64, len(cs))
	b.ReportAllocs()
	b.SetParallelism(max(1, parallel/runtimeProcs()))
	b.ResetTimer()
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		g := seed.Add(1)
		r := rand.New(rand.NewPCG(g, 3))
		args := []func([]string) []any{cs[0].args(r), cs[1].args(r)}
		call := make([]string, keysPerCall)
		w := int(g % 2)
		for pb.Next() {
			w ^= 1
			for k := range call {
				call[k] = keys[w][r.IntN(tenants)]
			}
			if err := cs[w].script.EvalSha(ctx, rdbs[w], call, args[w](call)...).Err(); err != nil {
				b.Error(err)
				return
			}
			calls[w].Add(1)
		}
	})
	b.StopTimer()
	// The callers' CPU: go-redis pipelining bare script calls, the least a
	// client of these scripts costs (the gate adds its own work on top).
	b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N*keysPerCall), "client-cpu-µs/decision")
	var perDecision [2]float64
	for i, admin := range admins {
		after, err := readStats(ctx, admin)
		if err != nil {
			b.Fatal(err)
		}
		decisions := float64(calls[i].Load() * keysPerCall)
		_, usec := scriptDelta(before[i], after)
		perDecision[i] = float64(usec) / decisions
		b.ReportMetric(perDecision[i], "script-µs/decision-"+cs[i].name)
		b.ReportMetric((after.cpu-before[i].cpu)*1e6/decisions, "redis-cpu-µs/decision-"+cs[i].name)
		b.ReportMetric(innerCalls(before[i], after)/decisions, "redis-cmds/decision-"+cs[i].name)
		b.Logf("%s: %s", cs[i].name, commandMix(before[i], after, decisions))
	}
	b.ReportMetric(perDecision[1]/perDecision[0], "other÷"+base.name)
}

// logContestant is admit.lua (or, with src, a script that takes its KEYS
// and ARGV) in the batched gate's shape: one quota for every key, one
// fresh ID of the gate's form each.
func logContestant(name string, script *redis.Script, q admission.Quota) contestant {
	return contestant{
		name:   name,
		script: script,
		key:    func(t int) string { return gateLogKey(Prefix+":gobench:"+name, "t"+strconv.Itoa(t)) },
		args: func(r *rand.Rand) func([]string) []any {
			nextID := gateIDs(r, q.Limit <= 120) // the gate's decimal IDs where the log stays a listpack
			// One quota, then for each key its quota index, not-before
			// time (none), count (1) and ID.
			args := []any{1, q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), 1}
			for range keysPerCall {
				args = append(args, 1, 0, 1, nil)
			}
			return func(keys []string) []any {
				for k := range keys {
					args[5+4*k+3] = nextID()
				}
				return args
			}
		},
	}
}

// BenchmarkScriptFloor runs admit.lua and, side by side, a script that
// only trims each tenant's log and records each ID (lua/floor/floor.lua):
// the least any sorted-set log can cost Redis. The metrics end in -admit
// and -other. The shape is the batched gate's on one Redis: 20 tenants of
// 1000 a call, one ID each, a quota of 100 per second that admits them all.
//
// ADMITQ_BENCH_OTHER_SCRIPT names a file to run in floor.lua's place, with
// admit.lua's KEYS and ARGV: a way to try a change to admit.lua against
// the current one, as each of the script's costs was measured.
// lua/floor/ttlfloor.lua is a second floor: it also counts each log and sets
// its TTL, as any limiter whose logs expire must.
func BenchmarkScriptFloor(b *testing.B) {
	q := admission.Quota{Limit: 100, Window: time.Second}
	sideBySide(b, logContestant("admit", admitLua(b), q), logContestant("other", otherScript(b, readScript(b, "lua/floor/floor.lua")), q))
}

// BenchmarkCounterScriptBatch runs counter.lua as the batched gate calls it
// in Counter mode (20 tenants of 1000 a call, one request each) and, side
// by side, admit.lua in Log mode in the same shape, both with a quota of
// 100 per second that admits every request: what Counter mode costs Redis
// per decision next to Log mode. The metrics end in -counter and -log.
//
// ADMITQ_BENCH_OTHER_SCRIPT names a file to run in admit.lua's place with
// counter.lua's KEYS and ARGV, -other: a way to try a change to counter.lua
// against the current one.
func BenchmarkCounterScriptBatch(b *testing.B) {
	q := admission.Quota{Limit: 100, Window: time.Second, Mode: admission.Counter}
	counter := func(name string, script *redis.Script) contestant {
		return contestant{
			name:   name,
			script: script,
			key:    func(t int) string { return Prefix + ":gobench:" + name + ":{t" + strconv.Itoa(t) + "}:cnt" },
			args: func(*rand.Rand) func([]string) []any {
				// One quota, then for each key its quota index, not-before
				// time (none) and count (1): admit.lua's, without IDs.
				args := []any{1, q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), 1}
				for range keysPerCall {
					args = append(args, 1, 0, 1)
				}
				return func([]string) []any { return args }
			},
		}
	}
	other := logContestant("log", admitLua(b), admission.Quota{Limit: q.Limit, Window: q.Window})
	if os.Getenv("ADMITQ_BENCH_OTHER_SCRIPT") != "" {
		if os.Getenv("XVSLOG") != "" {
			sideBySide(b, other, counter("xother", otherScript(b, "")))
			return
		}
		other = counter("other", otherScript(b, ""))
	}
	sideBySide(b, counter("counter", lua.Counter()), other)
}
