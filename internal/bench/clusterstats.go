package bench

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// MasterCPU is one cluster master's share of a contender's run.
type MasterCPU struct {
	Addr string `json:"addr"`
	// CPUSeconds is the master's CPU time (INFO cpu, user+sys) over the run.
	CPUSeconds float64 `json:"cpu_seconds"`
	// ScriptCalls is the EVAL/EVALSHA calls it counted (INFO commandstats).
	ScriptCalls int64 `json:"script_calls"`
	// Decisions is how many of the row's decisions it served: in proportion
	// to its script calls, or for a contender without scripts to its share
	// of the tenants.
	Decisions float64 `json:"decisions"`
	// CPUPerDecision is CPUSeconds over Decisions, µs: what one decision
	// costs the master that serves it.
	CPUPerDecision float64 `json:"cpu_usec_per_decision"`
}

// MasterTenants is how many of the run's tenants hash to one master.
type MasterTenants struct {
	Addr    string `json:"addr"`
	Tenants int    `json:"tenants"`
}

// readAll reads INFO on every master of a cluster, by address, or on the one
// server otherwise (keyed "").
func readAll(ctx context.Context, rdb redis.UniversalClient) (map[string]serverStats, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		s, err := readStats(ctx, rdb.(*redis.Client))
		return map[string]serverStats{"": s}, err
	}
	var mu sync.Mutex
	all := make(map[string]serverStats)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		s, err := readStats(ctx, node)
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		mu.Lock()
		all[node.Options().Addr] = s
		mu.Unlock()
		return nil
	})
	return all, err
}

// sumStats adds the servers' counters up.
func sumStats(all map[string]serverStats) serverStats {
	sum := serverStats{cmds: make(map[string]cmdStat)}
	for _, s := range all {
		sum.cpu += s.cpu
		for k, c := range s.cmds {
			t := sum.cmds[k]
			t.calls += c.calls
			t.usec += c.usec
			sum.cmds[k] = t
		}
	}
	return sum
}

// tenantSpread counts the tenants whose keys hash to each master, by CLUSTER
// KEYSLOT of the gate's log key and the slot map of CLUSTER SLOTS. Every
// contender's keys carry the tenant as their hash tag, so they all spread
// alike.
func tenantSpread(ctx context.Context, cc *redis.ClusterClient, tenants []string) ([]MasterTenants, error) {
	//lint:ignore SA1019 CLUSTER SLOTS still answers on Redis 7, and its slot ranges are all the spread needs
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER SLOTS: %w", err)
	}
	pipe := cc.Pipeline()
	cmds := make([]*redis.IntCmd, len(tenants))
	for i, t := range tenants {
		cmds[i] = pipe.ClusterKeySlot(ctx, gateLogKey(Prefix+":gate-batched", t))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("CLUSTER KEYSLOT: %w", err)
	}
	counts := make(map[string]int)
	for _, s := range slots {
		if len(s.Nodes) > 0 {
			counts[s.Nodes[0].Addr] += 0
		}
	}
	for _, c := range cmds {
		slot := c.Val()
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				counts[s.Nodes[0].Addr]++
				break
			}
		}
	}
	var spread []MasterTenants
	for _, addr := range slices.SortedFunc(maps.Keys(counts), compareAddr) {
		spread = append(spread, MasterTenants{Addr: addr, Tenants: counts[addr]})
	}
	return spread, nil
}

// compareAddr orders host:port addresses by host, then port as a number.
func compareAddr(a, b string) int {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	if ha != hb {
		if ha < hb {
			return -1
		}
		return 1
	}
	na, _ := strconv.Atoi(pa)
	nb, _ := strconv.Atoi(pb)
	return na - nb
}

// masterRows is the runner's per-master sums, in address order; nil off a
// cluster.
func (r *runner) masterRows() []MasterCPU {
	if len(r.masters) == 0 {
		return nil
	}
	var calls int64
	for _, m := range r.masters {
		calls += m.ScriptCalls
	}
	decisions := float64(r.total.decisions)
	var rows []MasterCPU
	for _, addr := range slices.SortedFunc(maps.Keys(r.masters), compareAddr) {
		m := *r.masters[addr]
		if calls > 0 {
			m.Decisions = decisions * float64(m.ScriptCalls) / float64(calls)
		} else {
			m.Decisions = decisions * r.share[addr]
		}
		if m.Decisions > 0 {
			m.CPUPerDecision = m.CPUSeconds * 1e6 / m.Decisions
		}
		rows = append(rows, m)
	}
	return rows
}

// masters counts a cluster's masters; 0 for one server.
func masters(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return 0, nil
	}
	var mu sync.Mutex
	n := 0
	err := cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error {
		mu.Lock()
		n++
		mu.Unlock()
		return nil
	})
	return n, err
}
