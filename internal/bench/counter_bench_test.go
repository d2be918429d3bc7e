package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// BenchmarkCounterScript measures counter.lua alone, as the gate calls it
// in Counter mode: one EVALSHA per decision, over 1000 tenants picked
// uniformly, by 64 callers. The quota, 100,000 per second in buckets of
// a tenth of it, admits every request, so this is the recording path.
func BenchmarkCounterScript(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client(b)
	const tenants, parallel = 1000, 64
	q := admission.Quota{Limit: 100_000, Window: time.Second, Mode: admission.Counter}
	b.Run(fmt.Sprintf("keys=1/ids=1/parallel=%d", parallel), func(b *testing.B) {
		rdb := benchClient(b, srv, parallel)
		script := lua.Counter()
		if err := script.Load(context.Background(), rdb).Err(); err != nil {
			b.Fatal(err)
		}
		names := make([]string, tenants)
		for i := range names {
			names[i] = fmt.Sprintf("%s:gobench:counter:{t%d}:cnt", Prefix, i)
		}
		// limit, window, max delay, granularity, buckets per window, n,
		// not-before time: the gate's ARGV for one request.
		args := []any{q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), 1, 10, 1, 0}
		var seed, admitted atomic.Uint64
		b.ReportAllocs()
		b.SetParallelism(max(1, parallel/runtimeProcs()))
		measureRedis(b, admin, 1, func() {
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(seed.Add(1), 2))
				ctx := context.Background()
				keys := make([]string, 1)
				var ok uint64
				for pb.Next() {
					keys[0] = names[r.IntN(tenants)]
					res, err := script.EvalSha(ctx, rdb, keys, args...).Int64Slice()
					if err != nil {
						b.Error(err)
						return
					}
					if res[1] == 0 {
						ok++
					}
				}
				admitted.Add(ok)
			})
		})
		b.ReportMetric(100*float64(admitted.Load())/float64(b.N), "admitted-%")
	})
}
