package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/admitq/admitq/internal/bench"
)

// benchNeighbour runs `bench --only neighbour`: bare asynq, admitq with
// rate limits only and admitq with MaxInFlight, side by side, with a noisy
// tenant's backlog and light tenants on real asynq workers. --duration
// sets how long the light tenants send (10s unless given).
func (a *app) benchNeighbour(cmd *cobra.Command, cfg bench.Config, asJSON bool) error {
	nc := bench.NeighbourConfig{}
	if cmd.Flags().Changed("duration") {
		nc.Duration = cfg.Duration
	}
	if a.redisURLOrEnv() != "" {
		rc, err := a.redisConfig()
		if err != nil {
			return err
		}
		if err := ping(cmd.Context(), rc, a.timeout); err != nil {
			return err
		}
		nc.Redis = rc.single
	}
	if isTerminal(a.stderr) {
		nc.Progress = func(s string) { fmt.Fprintf(a.stderr, "\r\x1b[Kneighbour: %s", s) }
	}
	rep, err := bench.RunNeighbour(cmd.Context(), nc)
	if nc.Progress != nil {
		fmt.Fprint(a.stderr, "\r\x1b[K")
	}
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(a.stdout, rep, true)
	}
	return rep.WriteText(a.stdout)
}
