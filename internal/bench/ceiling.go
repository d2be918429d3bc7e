package bench

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// ceiling is the decisions/s at which Redis would spend a whole core on
// the row's workload: its decisions over Redis's CPU seconds, which on a
// cluster are the busiest master's. 0 when unknown.
//
// Where Redis has a core of its own, as in production, no client can take
// a contender past it; on a machine that the callers share, it is what the
// contender would reach with a client that cost nothing.
func (row Row) ceiling() float64 {
	if len(row.Masters) > 0 {
		busiest := 0.0
		for _, m := range row.Masters {
			busiest = max(busiest, m.CPUSeconds)
		}
		return clusterCeiling(row.Decisions, busiest)
	}
	if row.RedisCPUPerDecision <= 0 {
		return 0
	}
	return 1e6 / row.RedisCPUPerDecision
}

// writeCeiling writes, on one Redis, each row's ceiling and how much of a
// core Redis spent on it, then what the ceilings say of two targets where
// Redis has a core of its own: the gate's ceiling over redis_rate's
// measured rate (as far past redis_rate as the gate could go, however
// little its client cost), with the Redis CPU per decision that 3× would
// take; and Enqueue's ceiling over bare asynq's. (On a cluster
// writeCluster gives the ceilings.)
func (r *Report) writeCeiling(b *strings.Builder) {
	if r.Redis.Cluster {
		return
	}
	b.WriteString("\nRedis's ceiling: the decisions/s at which Redis would spend a whole core, 1 s over its CPU per decision (INFO cpu)\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "contender\tceiling decisions/s\tRedis busy\t")
	for _, row := range r.Rows {
		busy := "-"
		if row.RedisCeiling > 0 {
			busy = fmt.Sprintf("%.0f%% of a core", 100*row.PerSecond/row.RedisCeiling)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", row.Name, fmtOpt(row.RedisCeiling, "%.0f"), busy)
	}
	tw.Flush()
	if _, ok := r.Row("gate-flood"); ok {
		b.WriteString("(the flood's ceiling counts the decisions its deny cache answered without Redis)\n")
	}
	if gate, rr, ok := r.ceilingPair("gate-batched", "redis-rate"); ok {
		fmt.Fprintf(b, "gate (batched) at its ceiling: %.2f× go-redis/redis_rate's measured decisions/s (%.2f× redis_rate's ceiling); "+
			"3× its measured rate would take ≤ %.1fµs of Redis CPU per decision, the gate took %.1fµs\n",
			gate.RedisCeiling/rr.PerSecond, gate.RedisCeiling/rr.RedisCeiling, 1e6/(3*rr.PerSecond), gate.RedisCPUPerDecision)
	}
	if enq, bare, ok := r.ceilingPair("enqueue", "asynq"); ok {
		fmt.Fprintf(b, "enqueue.Client.Enqueue at its ceiling: %.2f× bare asynq's ceiling; "+
			"0.9× would take ≤ %.1fµs of Redis CPU per task, Enqueue took %.1fµs (an admission and a write, against a write)\n",
			enq.RedisCeiling/bare.RedisCeiling, bare.RedisCPUPerDecision/0.9, enq.RedisCPUPerDecision)
	}
}

// ceilingPair returns the rows a and b when both ran and have ceilings.
func (r *Report) ceilingPair(a, b string) (Row, Row, bool) {
	ra, ok1 := r.Row(a)
	rb, ok2 := r.Row(b)
	return ra, rb, ok1 && ok2 && ra.RedisCeiling > 0 && rb.RedisCeiling > 0 && rb.PerSecond > 0
}
