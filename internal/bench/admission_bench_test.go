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
	"github.com/admitq/admitq/lua"
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
	calls, _ := scriptDelta(before, after)
	ops := float64(b.N)
	b.ReportMetric(float64(calls)/ops, "script-calls/op")
	b.ReportMetric((after.cpu-before.cpu)*1e6/ops, "redis-cpu-µs/op")
	if decisionsPerOp > 1 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/ops/float64(decisionsPerOp), "ns/decision")
	}
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

// BenchmarkScript measures admit.lua alone: one EVALSHA per op deciding
// ids new entry IDs of one tenant, over 1000 tenants picked uniformly, by
// 64 callers. The quota, 100 per 100ms, leaves room for nearly every ID,
// so this is the script's recording path on logs of a few dozen entries.
func BenchmarkScript(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client(b)
	const tenants, parallel = 1000, 64
	q := admission.Quota{Limit: 100, Window: 100 * time.Millisecond}
	for _, ids := range []int{1, 16} {
		b.Run(fmt.Sprintf("ids=%d/parallel=%d", ids, parallel), func(b *testing.B) {
			rdb := benchClient(b, srv, parallel)
			script := lua.Admit()
			if err := script.Load(context.Background(), rdb).Err(); err != nil {
				b.Fatal(err)
			}
			keys := make([]string, tenants)
			for i := range keys {
				keys[i] = gateLogKey(fmt.Sprintf("%s:gobench:script%d", Prefix, ids), "t"+strconv.Itoa(i))
			}
			var seed, admitted atomic.Uint64
			b.ReportAllocs()
			b.SetParallelism(max(1, parallel/runtimeProcs()))
			measureRedis(b, admin, ids, func() {
				b.RunParallel(func(pb *testing.PB) {
					g := seed.Add(1)
					r := rand.New(rand.NewPCG(g, 1))
					idPrefix := strconv.FormatUint(g, 36) + "."
					var n uint64
					// One quota, then the key's quota index, not-before
					// time (none), count and IDs.
					const head = 8
					args := make([]any, head+ids)
					copy(args, []any{1, q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), 1, 1, 0, ids})
					ctx := context.Background()
					var ok uint64
					for pb.Next() {
						for i := range ids {
							n++
							args[head+i] = idPrefix + strconv.FormatUint(n, 36)
						}
						res, err := script.EvalSha(ctx, rdb, keys[r.IntN(tenants):][:1], args...).Int64Slice()
						if err != nil {
							b.Error(err)
							return
						}
						for i := range ids {
							if res[1+3*i] == 0 {
								ok++
							}
						}
					}
					admitted.Add(ok)
				})
			})
			b.ReportMetric(100*float64(admitted.Load())/float64(b.N*ids), "admitted-%")
		})
	}
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
