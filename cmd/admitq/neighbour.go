package main

import (
	"fmt"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/admitq/admitq/internal/bench"
)

// scenarioInputs reads what a bench scenario on one server takes from the
// command line (the caller refused --redis-cluster): its Redis (nil for a
// throwaway one), once it answered a ping, and a progress line when stderr
// is a terminal.
func (a *app) scenarioInputs(cmd *cobra.Command, name string) (*redis.Options, func(string), error) {
	opts, _, _, err := a.benchTarget(cmd)
	if err != nil {
		return nil, nil, err
	}
	return opts, a.scenarioProgress(name), nil
}

// scenarioProgress is what a scenario says it is doing, on a terminal
// (nil elsewhere).
func (a *app) scenarioProgress(name string) func(string) {
	if !isTerminal(a.stderr) {
		return nil
	}
	return func(s string) { fmt.Fprintf(a.stderr, "\r\x1b[K%s: %s", name, s) }
}

// benchNeighbour runs `bench --only neighbour`: bare asynq, admitq with
// rate limits only and admitq with MaxInFlight, side by side, with a noisy
// tenant's backlog and light tenants on real asynq workers. --duration
// sets how long the light tenants send (10s unless given).
func (a *app) benchNeighbour(cmd *cobra.Command, cfg bench.Config, asJSON bool) error {
	nc := bench.NeighbourConfig{}
	if cmd.Flags().Changed("duration") {
		nc.Duration = cfg.Duration
	}
	var err error
	if nc.Redis, nc.Progress, err = a.scenarioInputs(cmd, "neighbour"); err != nil {
		return err
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
