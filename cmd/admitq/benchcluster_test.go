package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/bench"
	"github.com/admitq/admitq/internal/redistest"
)

// bench --redis-cluster starts its own 3-master cluster, runs the raw
// capacity comparison there and reports every master's share: the CPU per
// decision it served, and how the 1000 tenants spread.
func TestBenchRedisCluster(t *testing.T) {
	redistest.RequireRedis(t)
	r := mustRun(t, "bench", "--redis-cluster", "--only", "gate-batched,plain-lua,redis-rate",
		"--concurrency", "8", "--duration", "600ms", "--rounds", "1", "--warmup", "0", "--json")
	var rep bench.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, r)
	}
	if !rep.Redis.Cluster || !rep.Redis.Embedded || len(strings.Split(rep.Redis.Addr, ",")) != 3 {
		t.Fatalf("redis = %+v, want an embedded cluster of 3", rep.Redis)
	}

	if len(rep.Spread) != 3 {
		t.Fatalf("spread over %d masters, want 3: %+v", len(rep.Spread), rep.Spread)
	}
	total := 0
	for _, m := range rep.Spread {
		total += m.Tenants
		// 1000 tenants over 3 even slot ranges: about 333 each, with a
		// standard deviation of 15; 250..420 is over 5 of them.
		if m.Tenants < 250 || m.Tenants > 420 {
			t.Errorf("master %s has %d tenants, want about 333", m.Addr, m.Tenants)
		}
	}
	if total != 1000 {
		t.Errorf("spread counts %d tenants, want 1000", total)
	}

	if len(rep.Rows) != 3 {
		t.Fatalf("%d rows, want 3: %s", len(rep.Rows), r.stdout)
	}
	for _, row := range rep.Rows {
		if row.Errors > 0 || row.Decisions == 0 {
			t.Errorf("%s: %d decisions, %d errors (%s)", row.Name, row.Decisions, row.Errors, row.FirstError)
			continue
		}
		if len(row.Masters) != 3 {
			t.Errorf("%s: %d masters, want 3", row.Name, len(row.Masters))
			continue
		}
		var served float64
		for i, m := range row.Masters {
			if m.Addr != rep.Spread[i].Addr {
				t.Errorf("%s: master %d is %s, spread's is %s", row.Name, i, m.Addr, rep.Spread[i].Addr)
			}
			served += m.Decisions
			// Every master serves about a third of the tenants, so each
			// does work, and no decision costs less than a µs of Redis CPU
			// nor a whole ms.
			if m.ScriptCalls == 0 || m.CPUSeconds <= 0 {
				t.Errorf("%s on %s: %d script calls, %.3fs CPU: want both above 0", row.Name, m.Addr, m.ScriptCalls, m.CPUSeconds)
			}
			if m.CPUPerDecision < 1 || m.CPUPerDecision > 1000 {
				t.Errorf("%s on %s: %.1f µs CPU per decision, want 1..1000", row.Name, m.Addr, m.CPUPerDecision)
			}
		}
		if math.Abs(served-float64(row.Decisions)) > 1 {
			t.Errorf("%s: masters served %.0f decisions, the row has %d", row.Name, served, row.Decisions)
		}
	}

	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	for _, want := range []string{"embedded Redis Cluster of ", "per master: Redis CPU µs per decision", "ceiling decisions/s", "tenants per master: "} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	for _, m := range rep.Spread {
		if strings.Count(out, m.Addr) < 2 { // a column and the spread
			t.Errorf("text report names master %s fewer than twice:\n%s", m.Addr, out)
		}
	}
}

// On a cluster of the user's, given before or after the command, bench
// measures there and leaves no key behind.
func TestBenchOnYourCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	addrs := strings.Join(cl.Addrs(), ",")
	for _, args := range [][]string{
		{"--redis-cluster", addrs, "bench"},
		{"bench", "--redis-cluster", addrs},
	} {
		args = append(args, "--only", "gate-batched", "--concurrency", "4", "--tenants", "30",
			"--duration", "300ms", "--rounds", "1", "--warmup", "0", "--json")
		r := mustRun(t, args...)
		var rep bench.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, r)
		}
		if !rep.Redis.Cluster || rep.Redis.Embedded || rep.Redis.Addr != addrs || len(rep.Spread) != 3 ||
			len(rep.Rows) != 1 || rep.Rows[0].Decisions == 0 || len(rep.Rows[0].Masters) != 3 {
			t.Fatalf("%v: report %+v", args, rep)
		}
		cc := cl.Client(t)
		err := cc.ForEachMaster(t.Context(), func(ctx context.Context, node *redis.Client) error {
			if n, err := node.DBSize(ctx).Result(); err != nil || n != 0 {
				return fmt.Errorf("%s: DBSIZE %d, %v; want 0", node.Options().Addr, n, err)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	}
}
