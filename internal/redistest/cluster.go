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
	args := append([]string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", // in the node's own dir
		"--cluster-node-timeout", strconv.FormatInt(cfg.nodeTimeout.Milliseconds(), 10),
		// Nodes then name themselves 127.0.0.1 in CLUSTER SLOTS
		// from the start, which is where clients must go.
		"--cluster-announce-ip", "127.0.0.1",
		// A replica's first sync starts at once rather than after
		// the default 5 s wait for other replicas to join it.
		"--repl-diskless-sync-delay", "0",
	}, cfg.args...)
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
	if err := c.create(ctx, clients); err != nil {
		t.Fatalf("redistest: create cluster: %v", err)
	}
	if err := waitConverged(ctx, clients, len(c.replicas)/clusterMasters); err != nil {
		t.Fatalf("redistest: cluster %v: %v\n%s", c.Addrs(), err, describe(clients))
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
	if err := waitConverged(ctx, clients, len(c.replicas)/clusterMasters); err != nil {
		t.Fatalf("redistest: cluster %v: %v\n%s", c.Addrs(), err, describe(clients))
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

// create does what redis-cli --cluster create does, minus its 1 s polls:
// distinct config epochs, so no epoch collision has to be resolved first;
// slots; then a MEET between every pair, so no node waits for gossip to
// learn of another; then each replica follows its master. clients are
// the masters' then the replicas'.
func (c *Cluster) create(ctx context.Context, clients []*redis.Client) error {
	all := append(c.Nodes(), c.replicas...)
	masters := clients[:len(c.nodes)]
	for i, cl := range masters {
		if err := cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", all[i].Addr(), err)
		}
		lo, hi := slotRange(i, len(masters))
		if err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTS %d-%d: %w", all[i].Addr(), lo, hi, err)
		}
	}
	for i, cl := range clients {
		for _, peer := range all[i+1:] {
			if err := cl.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(peer.port)).Err(); err != nil {
				return fmt.Errorf("%s: CLUSTER MEET %s: %w", all[i].Addr(), peer.Addr(), err)
			}
		}
	}
	for i, cl := range clients[len(c.nodes):] {
		id, err := masters[i].Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER MYID: %w", all[i].Addr(), err)
		}
		// The replica refuses a master it has not met yet: the MEET
		// handshake takes a bus round trip or two.
		for {
			err := cl.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: CLUSTER REPLICATE %s: %w", c.replicas[i].Addr(), all[i].Addr(), err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// waitConverged polls until converged holds or ctx ends.
func waitConverged(ctx context.Context, clients []*redis.Client, replicas int) error {
	for {
		err := converged(ctx, clients, replicas)
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
// cluster_state:ok, all nodes and all slots, every master online with
// replicas replicas, each replica's link to its master up, and the same
// slot map.
func converged(ctx context.Context, clients []*redis.Client, replicas int) error {
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
		repl, err := cl.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("%s: INFO replication: %w", addr, err)
		}
		if f := infoFields(repl); f["role"] == "slave" && f["master_link_status"] != "up" {
			return fmt.Errorf("%s: replica's link to its master is %q", addr, f["master_link_status"])
		}
		shards, err := cl.ClusterShards(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER SHARDS: %w", addr, err)
		}
		m, err := slotMap(shards, replicas)
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
// to compare what nodes believe, or says which master is not online or
// lacks its replicas replicas.
func slotMap(shards []redis.ClusterShard, replicas int) (string, error) {
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
		in := 0
		for _, n := range sh.Nodes {
			// "loading" until the master's replication offset moves,
			// which on an idle master takes a ping period (10 s): the
			// replica's link is checked in converged instead.
			if n.Role == "replica" && n.Health != "failed" {
				in++
			}
		}
		if in != replicas {
			return "", fmt.Errorf("master %s has %d replicas online, want %d", addr, in, replicas)
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
