package bench

import (
	"fmt"
	"strings"
)

// writeCounter writes Counter mode's figure next to Log mode's, when both
// rows ran: Redis's time in scripts per admitted decision (INFO
// commandstats) and decisions/s, the gate (batched) being Log mode, and
// the ratios of the two.
func (r *Report) writeCounter(b *strings.Builder) {
	ctr, ok := r.Row("gate-counter")
	if !ok || ctr.Decisions == 0 {
		return
	}
	fmt.Fprintf(b, "\nCounter mode: %.0f decisions/s, %s Redis µs per admitted decision in scripts (INFO commandstats), %s script calls per decision",
		ctr.PerSecond, fmtOpt(ctr.ScriptUsecPerRecorded, "%.1f"), fmtRatio(ctr.ScriptCallsPerDecision))
	if log, ok := r.Row("gate-batched"); ok && log.PerSecond > 0 && log.ScriptUsecPerRecorded > 0 {
		fmt.Fprintf(b, "; Log mode (gate, batched) %.0f decisions/s, %.1fµs; Counter ÷ Log %.2f× in scripts, %.2f× in Redis CPU per decision (INFO cpu)",
			log.PerSecond, log.ScriptUsecPerRecorded, ctr.ScriptUsecPerRecorded/log.ScriptUsecPerRecorded, ctr.RedisCPUPerDecision/log.RedisCPUPerDecision)
	}
	b.WriteString("\n")
}
