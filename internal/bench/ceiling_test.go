package bench

import (
	"strings"
	"testing"
)

// TestCeiling checks the ceiling on one Redis (1 s over its CPU per
// decision) and on a cluster (the decisions over the busiest master's CPU
// seconds), and the gate's line against redis_rate.
func TestCeiling(t *testing.T) {
	for _, tc := range []struct {
		name string
		row  Row
		want float64
	}{
		{"one Redis", Row{Decisions: 1000, RedisCPUPerDecision: 16}, 62500},
		{"unknown CPU", Row{Decisions: 1000}, 0},
		{"cluster", Row{Decisions: 90000, RedisCPUPerDecision: 40, Masters: []MasterCPU{
			{Addr: "a", CPUSeconds: 1}, {Addr: "b", CPUSeconds: 1.5}, {Addr: "c", CPUSeconds: 1.1},
		}}, 60000},
	} {
		if got := tc.row.ceiling(); got != tc.want {
			t.Errorf("%s: ceiling %v, want %v", tc.name, got, tc.want)
		}
	}

	r := Report{Rows: []Row{
		{ID: "gate-batched", Name: "gate (batched)", Decisions: 1, PerSecond: 50000, RedisCPUPerDecision: 16},
		{ID: "redis-rate", Name: "go-redis/redis_rate", Decisions: 1, PerSecond: 25000, RedisCPUPerDecision: 32},
		{ID: "asynq", Name: "asynq Enqueue (bare)", Decisions: 1, PerSecond: 28000, RedisCPUPerDecision: 27},
		{ID: "enqueue", Name: "enqueue.Client.Enqueue", Decisions: 1, PerSecond: 25000, RedisCPUPerDecision: 33.75},
	}}
	r.finish()
	var b strings.Builder
	r.writeCeiling(&b)
	for _, want := range []string{
		"62500", "80% of a core", // the gate: 50000 of 62500
		"31250", // redis_rate
		"at its ceiling: 2.50× go-redis/redis_rate's measured decisions/s (2.00× redis_rate's ceiling)",
		"3× its measured rate would take ≤ 13.3µs of Redis CPU per decision, the gate took 16.0µs",
		"enqueue.Client.Enqueue at its ceiling: 0.80× bare asynq's ceiling; 0.9× would take ≤ 30.0µs of Redis CPU per task, Enqueue took 33.8µs",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("ceiling section lacks %q:\n%s", want, b.String())
		}
	}
}
