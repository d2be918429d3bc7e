package bench

import (
	"context"
	"fmt"
	"os"
	"sort"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestZZSlowlog(t *testing.T) {
	ctx := context.Background()
	cluster := os.Getenv("ZZ_CLUSTER") == "1"
	cfg := DispatchConfig{StartCluster: cluster}.withDefaults()
	tg, done, err := scenarioTarget(ctx, nil, nil, cluster)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	rep := DispatchReport{Config: cfg}
	s := &dispatchRun{cfg: cfg, tg: tg, rep: &rep}
	tenants := 500
	if os.Getenv("ZZ_ONE") == "1" {
		tenants = 0
	}
	for round := 0; round < 2; round++ {
		each(ctx, tg.admin, func(c *redis.Client) {
			c.ConfigSet(ctx, "slowlog-log-slower-than", "0")
			c.ConfigSet(ctx, "slowlog-max-len", "2000000")
			c.SlowLogReset(ctx)
		})
		d, err := s.drainPool(ctx, poolSpec{fair: true, workers: 64, spread: tenants}, 3000)
		if err != nil {
			t.Fatal(err)
		}
		agg := map[string][2]int64{}
		each(ctx, tg.admin, func(c *redis.Client) {
			logs, err := c.SlowLogGet(ctx, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range logs {
				name := l.Args[0]
				if (name == "evalsha" || name == "fcall") && len(l.Args) > 1 {
					name += " " + l.Args[1][:min(24, len(l.Args[1]))]
				}
				a := agg[name]
				a[0]++
				a[1] += l.Duration.Microseconds()
				agg[name] = a
			}
		})
		type kv struct {
			k string
			v [2]int64
		}
		var kvs []kv
		for k, v := range agg {
			kvs = append(kvs, kv{k, v})
		}
		sort.Slice(kvs, func(i, j int) bool { return kvs[i].v[1] > kvs[j].v[1] })
		fmt.Printf("round %d cpu %.1f µs/task rate %.0f\n", round, d.cpu, d.rate)
		for _, e := range kvs[:min(12, len(kvs))] {
			fmt.Printf("  %-28s %6.3f calls/task %7.2f µs/task %7.1f µs/call\n", e.k, float64(e.v[0])/3000, float64(e.v[1])/3000, float64(e.v[1])/float64(e.v[0]))
		}
	}
}

func each(ctx context.Context, c redis.UniversalClient, f func(*redis.Client)) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { f(n); return nil })
		return
	}
	f(c.(*redis.Client))
}
