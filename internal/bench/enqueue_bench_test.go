package bench

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// BenchmarkEnqueue measures asynq's bare EnqueueContext side by side with
// enqueue.Client.Enqueue (the gate, then the same EnqueueContext), with
// asynq's writes group-committed (batched, the default) and not, by 64
// callers over 1000 tenants picked uniformly, each with a quota of 100 per
// second and no MaxDelay, against a real redis-server. The enqueued tasks
// are removed after each sub-benchmark. With -cpuprofile, the difference
// between the two is what enqueue adds on the client.
func BenchmarkEnqueue(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client(b)
	const tenants, parallel = 1000, 64
	names := make([]string, tenants)
	for i := range names {
		names[i] = "t" + strconv.Itoa(i)
	}
	q := admission.Quota{Limit: 100, Window: time.Second}
	type enqueueFunc func(ctx context.Context, tenant string) error
	for _, c := range []struct {
		name string
		// build returns how the sub-benchmark enqueues one task for a
		// tenant, on its own client and keys (e).
		build func(b *testing.B, e env) enqueueFunc
	}{
		{"asynq", func(b *testing.B, e env) enqueueFunc {
			c := asynq.NewClientFromRedisClient(e.rdb)
			return func(ctx context.Context, _ string) error {
				_, err := c.EnqueueContext(ctx, asynq.NewTask("admitq-bench", benchPayload), asynq.Queue(queue))
				return err
			}
		}},
		{"enqueue/batched", func(b *testing.B, e env) enqueueFunc {
			g := newGate(e)
			b.Cleanup(func() { _ = g.Close() })
			c := enqueue.NewFromRedis(e.rdb, g)
			return func(ctx context.Context, tenant string) error {
				_, _, err := c.Enqueue(ctx, tenant, asynq.NewTask("admitq-bench", benchPayload), asynq.Queue(queue))
				if errors.Is(err, enqueue.ErrRejected) {
					return nil
				}
				return err
			}
		}},
		{"enqueue/unbatched", func(b *testing.B, e env) enqueueFunc {
			g := newGate(e)
			b.Cleanup(func() { _ = g.Close() })
			c := enqueue.NewFromRedis(e.rdb, g, enqueue.WithBatching(false))
			return func(ctx context.Context, tenant string) error {
				_, _, err := c.Enqueue(ctx, tenant, asynq.NewTask("admitq-bench", benchPayload), asynq.Queue(queue))
				if errors.Is(err, enqueue.ErrRejected) {
					return nil
				}
				return err
			}
		}},
	} {
		b.Run(c.name+"/tenants=1000/parallel=64", func(b *testing.B) {
			rdb := benchClient(b, srv, parallel)
			b.Cleanup(func() { _ = cleanup(context.Background(), admin) })
			// The clients' read timeout, not the gate's short default: a
			// machine busy with other tests must not fail the benchmark.
			e := env{rdb: rdb, prefix: Prefix + ":gobench:enqueue", quota: q, timeout: callTimeout(rdb.Options())}
			enq := c.build(b, e)
			var seed atomic.Uint64
			b.ReportAllocs()
			b.SetParallelism(max(1, parallel/runtimeProcs()))
			cpu0 := processCPU()
			measureRedis(b, admin, 1, func() {
				// Client CPU includes the gate's pipelines, which run off
				// the callers' goroutines.
				defer func() {
					b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/1e3/float64(b.N), "client-cpu-µs/op")
				}()
				b.RunParallel(func(pb *testing.PB) {
					r := rand.New(rand.NewPCG(seed.Add(1), 2))
					ctx := context.Background()
					for pb.Next() {
						if err := enq(ctx, names[r.IntN(tenants)]); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		})
	}
}
