package bench

import (
	"context"
	_ "embed"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

//go:embed testdata/floor.lua
var floorSrc string

// BenchmarkScriptFloor runs admit.lua and, side by side, a script that
// only trims each tenant's log and records each ID (testdata/floor.lua):
// the least any sorted-set log can cost Redis. Each has a redis-server of
// its own, and the callers' calls alternate between the two, so both see
// the same machine at the same time; the metrics end in -admit and
// -other. The shape is the batched gate's on one Redis: 20 tenants of
// 1000 a call, one ID each, a quota of 100 per second that admits them all.
//
// ADMITQ_BENCH_OTHER_SCRIPT names a file to run in floor.lua's place, with
// admit.lua's KEYS and ARGV: a way to try a change to admit.lua against
// the current one, as each of the script's costs was measured.
// testdata/ttlfloor.lua is a second floor: it also counts each log and sets
// its TTL, as any limiter whose logs expire must.
func BenchmarkScriptFloor(b *testing.B) {
	other := floorSrc
	if path := os.Getenv("ADMITQ_BENCH_OTHER_SCRIPT"); path != "" {
		src, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		other = string(src)
	}
	const tenants, parallel, keysPerCall = 1000, 64, 20
	q := admission.Quota{Limit: 100, Window: time.Second}
	scripts := []*redis.Script{lua.Admit(), redis.NewScript(other)}
	names := []string{"admit", "other"}
	rdbs := make([]*redis.Client, len(scripts))
	admins := make([]*redis.Client, len(scripts))
	ctx := context.Background()
	for i, s := range scripts {
		srv := redistest.Start(b)
		rdbs[i], admins[i] = benchClient(b, srv, parallel), srv.Client(b)
		if err := s.Load(ctx, rdbs[i]).Err(); err != nil {
			b.Fatal(err)
		}
	}
	keys := make([]string, tenants)
	for i := range keys {
		keys[i] = gateLogKey(Prefix+":gobench:floor", "t"+strconv.Itoa(i))
	}
	before := make([]serverStats, len(scripts))
	for i, admin := range admins {
		var err error
		if before[i], err = readStats(ctx, admin); err != nil {
			b.Fatal(err)
		}
	}
	var seed atomic.Uint64
	calls := make([]atomic.Int64, len(scripts))
	b.ReportAllocs()
	b.SetParallelism(max(1, parallel/runtimeProcs()))
	b.ResetTimer()
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		g := seed.Add(1)
		r := rand.New(rand.NewPCG(g, 3))
		nextID := gateIDs(r, true) // Limit 100: the gate's decimal IDs
		// One quota, then for each key its quota index, not-before time
		// (none), count (1) and ID.
		args := []any{1, q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), 1}
		for range keysPerCall {
			args = append(args, 1, 0, 1, nil)
		}
		call := make([]string, keysPerCall)
		w := int(g % 2)
		for pb.Next() {
			for k := range call {
				call[k] = keys[r.IntN(tenants)]
				args[5+4*k+3] = nextID()
			}
			w ^= 1
			if err := scripts[w].EvalSha(ctx, rdbs[w], call, args...).Err(); err != nil {
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
		b.ReportMetric(perDecision[i], "script-µs/decision-"+names[i])
		b.ReportMetric((after.cpu-before[i].cpu)*1e6/decisions, "redis-cpu-µs/decision-"+names[i])
		b.ReportMetric(innerCalls(before[i], after)/decisions, "redis-cmds/decision-"+names[i])
		b.Logf("%s: %s", names[i], commandMix(before[i], after, decisions))
	}
	b.ReportMetric(perDecision[1]/perDecision[0], "other÷admit")
}
