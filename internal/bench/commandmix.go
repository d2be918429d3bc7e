package bench

import (
	"fmt"
	"slices"
	"strings"
)

// innerCalls returns the commands Redis ran between two snapshots other
// than the script calls themselves and INFO: for a script, the redis.call
// commands it made, each of which has a fixed cost.
func innerCalls(before, after serverStats) float64 {
	var n int64
	for name, st := range after.cmds {
		if slices.Contains(scriptCommands, name) || name == "info" {
			continue
		}
		n += st.calls - before.cmds[name].calls
	}
	return float64(n)
}

// commandMix describes, per decision, the commands Redis ran between two
// snapshots and their µs (INFO commandstats), busiest first:
// "zadd 1.00×0.31µs, ...". Script calls include the time of the commands
// they ran.
func commandMix(before, after serverStats, decisions float64) string {
	type mix struct {
		name        string
		calls, usec float64
	}
	var ms []mix
	for name, st := range after.cmds {
		d := st.calls - before.cmds[name].calls
		if d == 0 || name == "info" {
			continue
		}
		ms = append(ms, mix{name, float64(d) / decisions, float64(st.usec-before.cmds[name].usec) / decisions})
	}
	slices.SortFunc(ms, func(a, b mix) int {
		switch {
		case a.usec > b.usec:
			return -1
		case a.usec < b.usec:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%s %.2f calls %.2fµs", m.name, m.calls, m.usec)
	}
	return strings.Join(parts, ", ")
}
