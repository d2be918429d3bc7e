package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/admitq/admitq/internal/bench"
)

// errFlowViolated is returned when the flow scenario ran but an invariant
// broke: a key above its cap, a task lost or run twice, a paused tenant's
// task running, a tenant capped at 1 out of order.
var errFlowViolated = errors.New("bench: flow control broke an invariant")

// benchFlow runs `bench --only flow`: concurrency keys and pause on a fair
// pool with real workers, --runs times. --concurrency sets the pool (64),
// --tenants the tenants sharing the key (1,000), --key-cap its cap (20) and
// --scale every task count.
func (a *app) benchFlow(cmd *cobra.Command, cfg bench.Config, fc bench.FlowConfig, scale float64, asJSON bool) error {
	if cmd.Flags().Changed("concurrency") {
		fc.Concurrency = cfg.Concurrency
	}
	fc = fc.Scale(scale)
	if cmd.Flags().Changed("tenants") {
		fc.Tenants = cfg.Tenants // as given, not scaled
	}
	var err error
	if fc.Redis, fc.Cluster, fc.StartCluster, err = a.benchTarget(cmd); err != nil {
		return err
	}
	fc.Progress = a.scenarioProgress(bench.Flow)
	rep, err := bench.RunFlow(cmd.Context(), fc)
	if fc.Progress != nil {
		fmt.Fprint(a.stderr, "\r\x1b[K")
	}
	if err != nil {
		return noRedisServer(err)
	}
	if asJSON {
		err = writeJSON(a.stdout, rep, true)
	} else {
		err = rep.WriteText(a.stdout)
	}
	if err == nil && len(rep.Violations) > 0 {
		err = fmt.Errorf("%w: %s", errFlowViolated, strings.Join(rep.Violations, "; "))
	}
	return err
}
