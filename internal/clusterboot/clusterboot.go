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
// with its nodes.conf in its working directory. The node names itself
// 127.0.0.1 in CLUSTER SLOTS from the start, which is where clients must go.
func ServerArgs() []string {
	return []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "5000",
		"--cluster-announce-ip", "127.0.0.1",
	}
}

// Create makes one cluster of the given cluster-enabled, empty nodes, each
// owning an even share of the slots in order. It does what redis-cli --cluster create does, minus its 1 s polls:
// distinct config epochs, so no epoch collision has to be resolved first;
// slots; then a MEET between every pair, so no node waits for gossip to
// learn of another.
func Create(ctx context.Context, clients []*redis.Client) error {
	for i, cl := range clients {
		if err := cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("%s: CLUSTER SET-CONFIG-EPOCH: %w", clients[i].Options().Addr, err)
		}
		lo, hi := SlotRange(i, len(clients))
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
	return nil
}

// WaitConverged polls until converged holds or ctx ends.
func WaitConverged(ctx context.Context, clients []*redis.Client) error {
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
