package redistest

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/clusterboot"
)

const (
	clusterTimeout = clusterboot.Timeout
	clusterMasters = clusterboot.Masters
)

// Cluster is a Redis Cluster of 3 masters without replicas, started by
// StartCluster. It is stopped when the test that started it ends.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts 3 cluster-enabled redis-servers, assigns each a third
// of the hash slots, joins them, and waits until every node reports
// cluster_state:ok and all agree on who owns which slot.
//
// If redis-server is not on PATH, the test is skipped (see RequireRedis).
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	bin := RequireRedis(t)
	c := &Cluster{}
	for range clusterMasters {
		c.nodes = append(c.nodes, start(t, bin, config{
			clusterBus: true,
			args:       clusterboot.ServerArgs(),
		}))
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	clients := c.nodeClients()
	defer closeAll(clients)
	if err := clusterboot.Create(ctx, clients); err != nil {
		t.Fatalf("redistest: create cluster: %v", err)
	}
	if err := clusterboot.WaitConverged(ctx, clients); err != nil {
		t.Fatalf("redistest: cluster %v: %v\n%s", c.Addrs(), err, clusterboot.Describe(clients))
	}
	return c
}

// Addrs returns the addresses of the 3 masters.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the 3 masters, in slot order, for chaos tests that Kill or
// Restart one. After Restart, use WaitHealthy before expecting the cluster
// to serve every slot again.
func (c *Cluster) Nodes() []*Server {
	return slices.Clone(c.nodes)
}

// Options returns new go-redis cluster options that seed from all 3 masters.
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs()}
}

// Client returns a new cluster client, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(c.Options())
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// WaitHealthy waits until every node reports cluster_state:ok and all agree
// on the slots, or fails t. A restarted node rejoins on its own; this is
// how a test knows it has.
func (c *Cluster) WaitHealthy(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	clients := c.nodeClients()
	defer closeAll(clients)
	if err := clusterboot.WaitConverged(ctx, clients); err != nil {
		t.Fatalf("redistest: cluster %v: %v\n%s", c.Addrs(), err, clusterboot.Describe(clients))
	}
}

// nodeClients returns one plain client per node. The nodes are known to be
// up, so these do not hit go-redis' dial-retry path.
func (c *Cluster) nodeClients() []*redis.Client {
	clients := make([]*redis.Client, len(c.nodes))
	for i, n := range c.nodes {
		clients[i] = redis.NewClient(n.Options())
	}
	return clients
}

func closeAll(clients []*redis.Client) {
	for _, cl := range clients {
		_ = cl.Close()
	}
}

// infoFields parses "key:value" lines, as in CLUSTER INFO.
func infoFields(info string) map[string]string { return clusterboot.InfoFields(info) }
