package redistest

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds cluster creation. A fresh master refuses to report
// cluster_state:ok for its first 2 s (CLUSTER_WRITABLE_DELAY), so creation
// takes a little over that however fast the machine.
const clusterTimeout = 20 * time.Second

// clusterMasters is how many masters StartCluster starts: the fewest Redis
// Cluster accepts, and enough for keys to spread.
const clusterMasters = 3

// slotRange returns the hash slots master i of n owns: an even split of the
// 16384 slots in order.
func slotRange(i, n int) (lo, hi int) {
	return i * 16384 / n, (i+1)*16384/n - 1
}

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
			args: []string{
				"--cluster-enabled", "yes",
				"--cluster-config-file", "nodes.conf", // in the node's own dir
				"--cluster-node-timeout", "5000",
				// Nodes then name themselves 127.0.0.1 in CLUSTER SLOTS
				// from the start, which is where clients must go.
				"--cluster-announce-ip", "127.0.0.1",
			},
		}))
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	clients := c.nodeClients()
	defer closeAll(clients)
	if err := c.create(ctx, clients); err != nil {
		t.Fatalf("redistest: create cluster: %v", err)
	}
	if err := waitConverged(ctx, clients); err != nil {
		t.Fatalf("redistest: cluster %v: %v\n%s", c.Addrs(), err, describe(clients))
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
	if err := waitConverged(ctx, clients); err != nil {
		t.Fatalf("redistest: cluster %v: %v\n%s", c.Addrs(), err, describe(clients))
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

// create does what redis-cli --cluster create does, minus its 1 s polls:
// distinct config epochs, so no epoch collision has to be resolved first;
// slots; then a MEET between every pair, so no node waits for gossip to
// learn of another.
func (c *Cluster) create(ctx context.Context, clients []*redis.Client) error {
	for i, cl := range clients {
		if err := cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", c.nodes[i].Addr(), err)
		}
		lo, hi := slotRange(i, len(clients))
		if err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTS %d-%d: %w", c.nodes[i].Addr(), lo, hi, err)
		}
	}
	for i, cl := range clients {
		for _, peer := range c.nodes[i+1:] {
			if err := cl.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(peer.port)).Err(); err != nil {
				return fmt.Errorf("%s: CLUSTER MEET %s: %w", c.nodes[i].Addr(), peer.Addr(), err)
			}
		}
	}
	return nil
}

// waitConverged polls until converged holds or ctx ends.
func waitConverged(ctx context.Context, clients []*redis.Client) error {
	for {
		err := converged(ctx, clients)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not healthy in time: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// converged reports why the cluster is not yet healthy: every node must see
// cluster_state:ok, all nodes and all slots, every master online, and the
// same slot map.
func converged(ctx context.Context, clients []*redis.Client) error {
	var first string
	for i, cl := range clients {
		addr := cl.Options().Addr
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", addr, err)
		}
		f := infoFields(info)
		want := map[string]string{
			"cluster_state":       "ok",
			"cluster_known_nodes": strconv.Itoa(len(clients)),
			"cluster_slots_ok":    "16384",
		}
		for k, v := range want {
			if f[k] != v {
				return fmt.Errorf("%s: %s is %q, want %q", addr, k, f[k], v)
			}
		}
		shards, err := cl.ClusterShards(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER SHARDS: %w", addr, err)
		}
		m, err := slotMap(shards)
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		if i == 0 {
			first = m
		} else if m != first {
			return fmt.Errorf("nodes disagree on slots: %s sees %s, %s sees %s", clients[0].Options().Addr, first, addr, m)
		}
	}
	return nil
}

// slotMap renders CLUSTER SHARDS as "start-end=master ..." in slot order,
// to compare what nodes believe, or says which master is not online.
func slotMap(shards []redis.ClusterShard) (string, error) {
	type owned struct {
		start, end int64
		master     string
	}
	var ranges []owned
	for _, sh := range shards {
		i := slices.IndexFunc(sh.Nodes, func(n redis.Node) bool { return n.Role == "master" })
		if i < 0 {
			continue // a shard left without a master owns nothing we can reach
		}
		m := sh.Nodes[i]
		addr := net.JoinHostPort(m.IP, strconv.FormatInt(m.Port, 10))
		if m.Health != "online" {
			return "", fmt.Errorf("master %s is %s", addr, m.Health)
		}
		for _, r := range sh.Slots {
			ranges = append(ranges, owned{r.Start, r.End, addr})
		}
	}
	slices.SortFunc(ranges, func(a, b owned) int { return cmp.Compare(a.start, b.start) })
	parts := make([]string, len(ranges))
	for i, r := range ranges {
		parts[i] = fmt.Sprintf("%d-%d=%s", r.start, r.end, r.master)
	}
	return strings.Join(parts, " "), nil
}

// infoFields parses "key:value" lines, as in CLUSTER INFO.
func infoFields(info string) map[string]string {
	f := make(map[string]string)
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			f[k] = v
		}
	}
	return f
}

// describe returns each node's CLUSTER NODES, for failure messages.
func describe(clients []*redis.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var b strings.Builder
	for _, cl := range clients {
		nodes, err := cl.ClusterNodes(ctx).Result()
		if err != nil {
			nodes = err.Error() + "\n"
		}
		fmt.Fprintf(&b, "--- CLUSTER NODES on %s ---\n%s", cl.Options().Addr, nodes)
	}
	return b.String()
}
