package redistest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/clusterboot"
)

const (
	clusterTimeout = clusterboot.Timeout
	clusterMasters = clusterboot.Masters
)

// A ClusterOption configures a cluster started by StartCluster.
type ClusterOption interface {
	applyCluster(*clusterConfig)
}

type clusterOptionFunc func(*clusterConfig)

func (f clusterOptionFunc) applyCluster(c *clusterConfig) { f(c) }

type clusterConfig struct {
	replicas    bool
	nodeTimeout time.Duration
	args        []string
}

// WithReplicas gives each master one replica, so that the cluster fails
// over when a master dies: 3 masters and 3 replicas.
func WithReplicas() ClusterOption {
	return clusterOptionFunc(func(c *clusterConfig) { c.replicas = true })
}

// WithNodeTimeout sets cluster-node-timeout, how long a node may go
// unanswered before the others mark it failed (the default here is 5 s).
// Failover tests use 1 s, so that a replica takes over within about 3 s.
func WithNodeTimeout(d time.Duration) ClusterOption {
	return clusterOptionFunc(func(c *clusterConfig) { c.nodeTimeout = d })
}

// WithClusterArgs appends redis-server arguments for every node, such as
// WithClusterArgs("--cluster-require-full-coverage", "no").
func WithClusterArgs(args ...string) ClusterOption {
	return clusterOptionFunc(func(c *clusterConfig) { c.args = append(c.args, args...) })
}

// Cluster is a Redis Cluster of 3 masters, without replicas or, with
// WithReplicas, with one each, started by StartCluster. It is stopped when
// the test that started it ends.
type Cluster struct {
	nodes    []*Server // the masters as started, in slot order
	replicas []*Server // replicas[i] replicates nodes[i]
}

// StartCluster starts 3 cluster-enabled redis-servers (6 with
// WithReplicas), assigns each master a third of the hash slots, joins them,
// and waits until every node reports cluster_state:ok, all agree on who
// owns which slot, and every replica is in sync with its master.
//
// If redis-server is not on PATH, the test is skipped (see RequireRedis).
func StartCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	bin := RequireRedis(t)
	cfg := clusterConfig{nodeTimeout: 5 * time.Second}
	for _, o := range opts {
		o.applyCluster(&cfg)
	}
	args := append(clusterboot.ServerArgs(cfg.nodeTimeout), cfg.args...)
	c := &Cluster{}
	for range clusterMasters {
		c.nodes = append(c.nodes, start(t, bin, config{clusterBus: true, args: args}))
	}
	if cfg.replicas {
		for range clusterMasters {
			c.replicas = append(c.replicas, start(t, bin, config{clusterBus: true, args: args}))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	clients := c.nodeClients()
	defer closeAll(clients)
	if err := clusterboot.Create(ctx, clients[:len(c.nodes)], clients[len(c.nodes):]); err != nil {
		t.Fatalf("redistest: create cluster: %v", err)
	}
	if err := clusterboot.WaitConverged(ctx, clients, len(c.replicas)/clusterMasters); err != nil {
		t.Fatalf("redistest: cluster %v: %v\n%s", c.Addrs(), err, clusterboot.Describe(clients))
	}
	return c
}

// Addrs returns the addresses of the 3 masters as started.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the 3 masters as started, in slot order, for chaos tests
// that Kill or Restart one. After Restart, use WaitHealthy before expecting
// the cluster to serve every slot again.
func (c *Cluster) Nodes() []*Server {
	return slices.Clone(c.nodes)
}

// Replicas returns the replicas as started (none without WithReplicas):
// Replicas()[i] replicates Nodes()[i] until a failover swaps their roles.
func (c *Cluster) Replicas() []*Server {
	return slices.Clone(c.replicas)
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
	if err := clusterboot.WaitConverged(ctx, clients, len(c.replicas)/clusterMasters); err != nil {
		t.Fatalf("redistest: cluster %v: %v\n%s", c.Addrs(), err, clusterboot.Describe(clients))
	}
}

// Serving reports whether the cluster serves every slot again after
// nodes were killed: every node still running reports cluster_state:ok,
// and all of them name the same running masters for all 16384 slots. It
// returns nil when so, or what is not so yet. Failover tests poll it to
// time when Redis is back.
func (c *Cluster) Serving(ctx context.Context) error {
	var clients []*redis.Client
	live := map[string]bool{}
	for _, n := range append(c.Nodes(), c.replicas...) {
		if n.running() {
			clients = append(clients, redis.NewClient(n.Options()))
			live[n.Addr()] = true
		}
	}
	defer closeAll(clients)
	var first string
	for i, cl := range clients {
		addr := cl.Options().Addr
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", addr, err)
		}
		if f := infoFields(info); f["cluster_state"] != "ok" {
			return fmt.Errorf("%s: cluster_state is %q", addr, f["cluster_state"])
		}
		//lint:ignore SA1019 CLUSTER SLOTS still answers on every Redis the tests run (7.0+), and its ranges are what is checked
		slots, err := cl.ClusterSlots(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER SLOTS: %w", addr, err)
		}
		var ranges []string
		served := 0
		for _, s := range slots {
			if len(s.Nodes) == 0 || !live[s.Nodes[0].Addr] {
				return fmt.Errorf("%s: slots %d-%d served by %v, which is down", addr, s.Start, s.End, s.Nodes)
			}
			served += s.End - s.Start + 1
			ranges = append(ranges, fmt.Sprintf("%d-%d=%s", s.Start, s.End, s.Nodes[0].Addr))
		}
		if served != 16384 {
			return fmt.Errorf("%s: %d slots served, want 16384", addr, served)
		}
		slices.Sort(ranges)
		m := strings.Join(ranges, " ")
		if i == 0 {
			first = m
		} else if m != first {
			return fmt.Errorf("nodes disagree on slots: %s sees %s, %s sees %s", clients[0].Options().Addr, first, addr, m)
		}
	}
	return nil
}

// running reports whether s's process is up (not killed or stopped).
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// nodeClients returns one plain client per node, masters first. The nodes
// are known to be up, so these do not hit go-redis' dial-retry path.
func (c *Cluster) nodeClients() []*redis.Client {
	all := append(c.Nodes(), c.replicas...)
	clients := make([]*redis.Client, len(all))
	for i, n := range all {
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
