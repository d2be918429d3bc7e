package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/clusterboot"
)

// startCluster starts a throwaway Redis Cluster of clusterboot.Masters
// masters without replicas, each a redis-server on a free loopback port in
// its own directory, like internal/redistest's, and waits until every node
// agrees on the slots. stop kills them all and removes their directories.
func startCluster(ctx context.Context) (addrs []string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, nil, fmt.Errorf("%w (on Debian or Ubuntu: apt-get install redis-server)", ErrNoRedisServer)
	}
	root, err := os.MkdirTemp("", "admitq-bench-cluster-")
	if err != nil {
		return nil, nil, err
	}
	var kills []func()
	stop = func() {
		for _, k := range kills {
			k()
		}
		os.RemoveAll(root)
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	for i := range clusterboot.Masters {
		dir := filepath.Join(root, strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, nil, err
		}
		var addr string
		var kill func()
		// The cluster bus listens on port+10000, which may be taken even
		// when the port is free; try a few.
		for range 5 {
			addr, kill, err = launchRedis(ctx, bin, dir, clusterboot.ServerArgs(5*time.Second))
			if err == nil || ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			return nil, nil, err
		}
		kills = append(kills, kill)
		addrs = append(addrs, addr)
	}

	ctx, cancel := context.WithTimeout(ctx, clusterboot.Timeout)
	defer cancel()
	clients := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a})
		defer clients[i].Close()
	}
	if err = clusterboot.Create(ctx, clients, nil); err != nil {
		return nil, nil, fmt.Errorf("bench: create cluster: %w", err)
	}
	if err = clusterboot.WaitConverged(ctx, clients, 0); err != nil {
		return nil, nil, fmt.Errorf("bench: cluster %v: %w\n%s", addrs, err, clusterboot.Describe(clients))
	}
	return addrs, stop, nil
}
