package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// target is the Redis a run measures on: one server or a cluster, the
// bench's own or the caller's.
type target struct {
	admin    redis.UniversalClient
	client   func(pool int) redis.UniversalClient // a contender's own client
	single   *redis.Options                       // the one server's, off a cluster
	timeout  time.Duration                        // the gate's per-call deadline
	addr     string
	embedded bool
	stop     func()
}

func (t *target) close() {
	t.admin.Close()
	if t.stop != nil {
		t.stop()
	}
}

// connect starts or reaches the Redis cfg names and checks it answers.
func connect(ctx context.Context, cfg Config) (*target, error) {
	tg := &target{}
	switch {
	case cfg.Redis == nil && (cfg.Cluster != nil || cfg.StartCluster):
		opts := cfg.Cluster
		if opts == nil {
			addrs, stop, err := startCluster(ctx)
			if err != nil {
				return nil, err
			}
			tg.stop, tg.embedded = stop, true
			opts = &redis.ClusterOptions{Addrs: addrs}
		}
		tg.addr = strings.Join(opts.Addrs, ",")
		tg.timeout = 3 * time.Second // go-redis's default read timeout
		if opts.ReadTimeout > 0 {
			tg.timeout = opts.ReadTimeout
		}
		tg.client = func(pool int) redis.UniversalClient {
			o := *opts
			o.PoolSize = pool // per master
			return redis.NewClusterClient(&o)
		}
	default:
		opts := cfg.Redis
		if opts == nil {
			addr, stop, err := startRedis(ctx)
			if err != nil {
				return nil, err
			}
			tg.stop, tg.embedded = stop, true
			opts = &redis.Options{Addr: addr}
		}
		tg.addr, tg.single = opts.Addr, opts
		tg.timeout = callTimeout(opts)
		tg.client = func(pool int) redis.UniversalClient { return redis.NewClient(withPool(opts, pool)) }
	}
	tg.admin = tg.client(2)
	if err := tg.admin.Ping(ctx).Err(); err != nil {
		tg.close()
		return nil, fmt.Errorf("bench: redis at %s: %w", tg.addr, err)
	}
	return tg, nil
}
