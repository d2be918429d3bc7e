package bench

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// writeCluster writes, on a cluster, each row's Redis CPU per decision on
// every master, the tenants' spread, and the capacity that per-master cost
// implies.
func (r *Report) writeCluster(b *strings.Builder) {
	if !r.Redis.Cluster {
		return
	}
	b.WriteString("\nper master: Redis CPU µs per decision it served (its share of the decisions)\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "contender\t"
	for _, m := range r.Spread {
		head += m.Addr + "\t"
	}
	fmt.Fprintln(tw, head+"ceiling decisions/s\t")
	for _, row := range r.Rows {
		line := row.Name + "\t"
		for _, s := range r.Spread {
			cell := "-"
			for _, m := range row.Masters {
				if m.Addr == s.Addr && row.Decisions > 0 {
					cell = fmt.Sprintf("%.1f (%.0f%%)", m.CPUPerDecision, 100*m.Decisions/float64(row.Decisions))
				}
			}
			line += cell + "\t"
		}
		fmt.Fprintf(tw, "%s%s\t\n", line, fmtOpt(row.RedisCeiling, "%.0f"))
	}
	tw.Flush()
	b.WriteString("ceiling: decisions over the busiest master's CPU seconds, the rate at which it would saturate a core of its own;\n" +
		"  with an even spread that is masters × 1e6 / µs per decision\n")
	if len(r.Spread) > 0 {
		parts := make([]string, len(r.Spread))
		lo, hi := r.Spread[0].Tenants, r.Spread[0].Tenants
		for i, m := range r.Spread {
			parts[i] = fmt.Sprintf("%s %d", m.Addr, m.Tenants)
			lo, hi = min(lo, m.Tenants), max(hi, m.Tenants)
		}
		mean := float64(r.Tenants) / float64(len(r.Spread))
		fmt.Fprintf(b, "tenants per master: %s (fewest %d, most %d, most ÷ mean %.2f)\n", strings.Join(parts, ", "), lo, hi, float64(hi)/mean)
	}
}

// clusterCeiling is the decisions/s at which the busiest master, which
// spent cpu seconds on decisions, would use a whole core: the cluster's
// capacity if each master had a core of its own. 0 when unknown.
func clusterCeiling(decisions int64, cpu float64) float64 {
	if cpu <= 0 {
		return 0
	}
	return float64(decisions) / cpu
}
