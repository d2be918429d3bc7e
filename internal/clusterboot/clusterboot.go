// Package clusterboot creates a Redis Cluster out of freshly started,
// cluster-enabled redis-servers, faster than redis-cli --cluster create. It
// is shared by internal/redistest (for tests) and internal/bench (for
// admitq bench --redis-cluster), which start the processes their own ways.
package clusterboot

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Timeout bounds cluster creation. A fresh master refuses to report
// cluster_state:ok for its first 2 s (CLUSTER_WRITABLE_DELAY), so creation
// takes a little over that however fast the machine.
const Timeout = 20 * time.Second

// Masters is how many masters a cluster gets: the fewest Redis Cluster
// accepts, and enough for keys to spread.
const Masters = 3

// SlotRange returns the hash slots master i of n owns: an even split of the
// 16384 slots in order.
func SlotRange(i, n int) (lo, hi int) {
	return i * 16384 / n, (i+1)*16384/n - 1
}

// ServerArgs are the redis-server arguments that make a node cluster-enabled,
// with its nodes.conf in its working directory, marked failed by the others
// after nodeTimeout unanswered.
func ServerArgs(nodeTimeout time.Duration) []string {
	return []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", // in the node's own dir
		"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
		// Nodes then name themselves 127.0.0.1 in CLUSTER SLOTS from the
		// start, which is where clients must go.
		"--cluster-announce-ip", "127.0.0.1",
		// A replica's first sync starts at once rather than after the
		// default 5 s wait for other replicas to join it.
		"--repl-diskless-sync-delay", "0",
	}
}

// Create makes one cluster of the given cluster-enabled, empty nodes: each
// master owns an even share of the slots in order, and replicas[i], if
// any, replicates masters[i]. It does what redis-cli --cluster create does,
// minus its 1 s polls:
// distinct config epochs, so no epoch collision has to be resolved first;
// slots; then a MEET between every pair, so no node waits for gossip to
// learn of another; then each replica follows its master.
func Create(ctx context.Context, masters, replicas []*redis.Client) error {
	clients := append(slices.Clip(masters), replicas...)
	for i, cl := range masters {
		if err := cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", clients[i].Options().Addr, err)
		}
		lo, hi := SlotRange(i, len(masters))
		if err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER ADDSLOTS %d-%d: %w", clients[i].Options().Addr, lo, hi, err)
		}
	}
	for i, cl := range clients {
		for _, peer := range clients[i+1:] {
			host, port, err := net.SplitHostPort(peer.Options().Addr)
			if err != nil {
				return err
			}
			if err := cl.ClusterMeet(ctx, host, port).Err(); err != nil {
				return fmt.Errorf("%s: CLUSTER MEET %s: %w", clients[i].Options().Addr, peer.Options().Addr, err)
			}
		}
	}
	for i, cl := range replicas {
		id, err := masters[i].Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER MYID: %w", clients[i].Options().Addr, err)
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
				return fmt.Errorf("%s: CLUSTER REPLICATE %s: %w", cl.Options().Addr, clients[i].Options().Addr, err)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// WaitConverged polls until converged holds or ctx ends.
func WaitConverged(ctx context.Context, clients []*redis.Client, replicas int) error {
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
		f := InfoFields(info)
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
		if f := InfoFields(repl); f["role"] == "slave" && f["master_link_status"] != "up" {
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

// InfoFields parses "key:value" lines, as in CLUSTER INFO.
func InfoFields(info string) map[string]string {
	f := make(map[string]string)
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			f[k] = v
		}
	}
	return f
}

// Describe returns each node's CLUSTER NODES, for failure messages.
func Describe(clients []*redis.Client) string {
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
