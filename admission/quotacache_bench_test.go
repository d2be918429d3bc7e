package admission

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
)

// countHook counts the commands a client sends, alone or in pipelines, and
// apart those sent under a context marked with fgKey: a caller's own.
type countHook struct{ n, fg atomic.Int64 }

type fgKey struct{}

func (h *countHook) count(ctx context.Context, n int) {
	h.n.Add(int64(n))
	if ctx.Value(fgKey{}) != nil {
		h.fg.Add(int64(n))
	}
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.count(ctx, 1); return next(ctx, cmd) }
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.count(ctx, len(cmds)); return next(ctx, cmds) }
}

// BenchmarkQuotaLookup looks quotas up for random tenants of a warm cache
// of 100k, past the refresh interval, and reports the lookup's p50 and p99
// and the Redis calls per lookup (foreground and background rereads).
// Run it with -benchtime=3s so that entries go stale and get reread.
func BenchmarkQuotaLookup(b *testing.B) {
	const tenants = 100_000
	srv := redistest.Start(b)
	rdb := srv.Client(b)
	hook := &countHook{}
	rdb.AddHook(hook)
	r := NewRedisQuotas(rdb)
	q := Quota{Limit: 10, Window: time.Second}
	if err := r.SetDefault(b.Context(), q); err != nil {
		b.Fatal(err)
	}
	names := make([]string, tenants)
	now := time.Now()
	for i := range names {
		names[i] = "tenant-" + strconv.Itoa(i)
		r.store(&r.tenants, names[i], q, nil, now)
	}
	calls, fg := hook.n.Load(), hook.fg.Load()
	ctx := context.WithValue(b.Context(), fgKey{}, true)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t := names[rand.IntN(tenants)]
		start := time.Now()
		if _, err := r.Quota(ctx, t); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(hook.n.Load()-calls)/float64(b.N), "redis-calls/lookup")
	b.ReportMetric(float64(hook.fg.Load()-fg)/float64(b.N), "sync-misses/lookup")
}
