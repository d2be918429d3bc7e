package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// benchClient returns a client of srv with a connection for every caller.
func benchClient(b *testing.B, srv *redistest.Server, callers int) *redis.Client {
	rdb := redis.NewClient(withPool(srv.Options(), callers+4))
	b.Cleanup(func() { rdb.Close() })
	return rdb
}

// measureRedis reports, per op, the script calls and the CPU time Redis
// spent while f ran, from INFO.
func measureRedis(b *testing.B, admin *redis.Client, decisionsPerOp int, f func()) {
	ctx := context.Background()
	before, err := readStats(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	f()
	b.StopTimer()
	after, err := readStats(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	calls, usec := scriptDelta(before, after)
	ops := float64(b.N)
	decisions := ops * float64(decisionsPerOp)
	b.ReportMetric(float64(calls)/ops, "script-calls/op")
	b.ReportMetric((after.cpu-before.cpu)*1e6/ops, "redis-cpu-µs/op")
	// Redis's own time in the scripts (INFO commandstats), per decision:
	// the figure issue 16 sets a target on, far steadier on a loaded
	// machine than wall time or INFO cpu, which counts the I/O too.
	b.ReportMetric(float64(usec)/decisions, "script-µs/decision")
	b.ReportMetric(innerCalls(before, after)/decisions, "redis-cmds/decision")
	// Reads from sockets: about one per round trip, a pipeline's included.
	b.ReportMetric(float64(after.reads-before.reads)/ops, "redis-reads/op")
	if decisionsPerOp > 1 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/decisions, "ns/decision")
	}
	b.Logf("per decision: %s", commandMix(before, after, decisions))
}

// BenchmarkAdmit measures Gate.Admit with generated IDs, with and without
// group commit, over 1000 tenants picked uniformly, each with a quota of
// 100 per second and no MaxDelay (so it admits and rejects), against a real
// redis-server.
func BenchmarkAdmit(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client(b)
	const tenants = 1000
	names := make([]string, tenants)
	for i := range names {
		names[i] = "t" + strconv.Itoa(i)
	}
	q := admission.Quota{Limit: 100, Window: time.Second}
	for _, mode := range []struct {
		name string
		opts []admission.Option
	}{
		{"batched", nil},
		{"unbatched", []admission.Option{admission.WithBatching(false)}},
	} {
		for _, parallel := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/tenants=%d/parallel=%d", mode.name, tenants, parallel), func(b *testing.B) {
				rdb := benchClient(b, srv, parallel)
				prefix := fmt.Sprintf("%s:gobench:%s:%d", Prefix, mode.name, parallel)
				// The clients' read timeout, not the gate's short default: a
				// machine busy with other tests must not fail the benchmark.
				opts := append([]admission.Option{admission.WithPrefix(prefix), admission.WithTimeout(callTimeout(rdb.Options()))}, mode.opts...)
				g := admission.New(rdb, admission.StaticQuotas{Default: &q}, opts...)
				var seed atomic.Uint64
				b.ReportAllocs()
				b.SetParallelism(max(1, parallel/runtimeProcs()))
				measureRedis(b, admin, 1, func() {
					b.RunParallel(func(pb *testing.PB) {
						r := rand.New(rand.NewPCG(seed.Add(1), 0))
						ctx := context.Background()
						for pb.Next() {
							if _, err := g.Admit(ctx, names[r.IntN(tenants)]); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			})
		}
	}
}

// gateIDs returns a source of entry IDs of the forms the gate generates
// (admission's idGen): for a log that stays a listpack, a counter from a
// random start in decimal below 2^63, which Redis keeps there as an
// integer; for one that can grow past it (listpack false), a random
// prefix and the counter in base 36.
func gateIDs(r *rand.Rand, listpack bool) func() string {
	v, n := r.Uint64(), uint64(0)
	prefix := strconv.FormatUint(v>>24, 36) + "."
	return func() string {
		n++
		if listpack {
			return strconv.FormatUint((v+n)&(1<<63-1), 10)
		}
		return prefix + strconv.FormatUint(n, 36)
	}
}

// BenchmarkScript measures admit.lua alone: one EVALSHA per op deciding
// ids new entry IDs for each of keys tenants, picked uniformly from 1000,
// by 64 callers. keys=32 is the shape of the batched gate's calls on one
// Redis (a batch across tenants, one ID each). The quota, 1000 per second,
// leaves room for every ID, so this is the script's recording path, where
// every decision is an admission, on logs of a few dozen entries.
func BenchmarkScript(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client(b)
	const tenants, parallel = 1000, 64
	q := admission.Quota{Limit: 1000, Window: time.Second}
	for _, shape := range []struct{ keys, ids int }{{1, 1}, {1, 16}, {32, 1}} {
		b.Run(fmt.Sprintf("keys=%d/ids=%d/parallel=%d", shape.keys, shape.ids, parallel), func(b *testing.B) {
			rdb := benchClient(b, srv, parallel)
			script := admitLua(b)
			if err := script.Load(context.Background(), rdb).Err(); err != nil {
				b.Fatal(err)
			}
			names := make([]string, tenants)
			for i := range names {
				names[i] = gateLogKey(fmt.Sprintf("%s:gobench:script%dx%d", Prefix, shape.keys, shape.ids), "t"+strconv.Itoa(i))
			}
			perOp := shape.keys * shape.ids
			var seed, admitted atomic.Uint64
			b.ReportAllocs()
			b.SetParallelism(max(1, parallel/runtimeProcs()))
			measureRedis(b, admin, perOp, func() {
				b.RunParallel(func(pb *testing.PB) {
					g := seed.Add(1)
					r := rand.New(rand.NewPCG(g, 1))
					nextID := gateIDs(r, false) // Limit 1000: the gate's base-36 IDs
					// One quota, then for each key its quota index,
					// not-before time (none), count and IDs.
					args := []any{1, q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), 1}
					const head = 5
					for range shape.keys {
						args = append(args, 1, 0, shape.ids)
						args = append(args, make([]any, shape.ids)...)
					}
					keys := make([]string, shape.keys)
					ctx := context.Background()
					var ok uint64
					for pb.Next() {
						a := head
						for k := range keys {
							keys[k] = names[r.IntN(tenants)]
							a += 3
							for range shape.ids {
								args[a] = nextID()
								a++
							}
						}
						res, err := script.EvalSha(ctx, rdb, keys, args...).Int64Slice()
						if err != nil {
							b.Error(err)
							return
						}
						// now, then per key: 3 per ID and a hint.
						off := 1
						for range keys {
							for range shape.ids {
								if res[off] == 0 {
									ok++
								}
								off += 3
							}
							off++
						}
					}
					admitted.Add(ok)
				})
			})
			b.ReportMetric(100*float64(admitted.Load())/float64(b.N*perOp), "admitted-%")
		})
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
