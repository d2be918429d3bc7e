package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/bench"
)

func (a *app) newBenchCmd() *cobra.Command {
	var (
		cfg             bench.Config
		window, maxWait time.Duration
		limit           int
		asJSON, check   bool
		runs            int
		tasks           int
		mix             bool
		flow            bench.FlowConfig
		scale           float64
	)
	cmd := &cobra.Command{
		Use:   "bench [--concurrency 64] [--tenants 1000] [--limit 100] [--duration 5s] [--json]",
		Short: "Measure the gate side by side with the alternatives, at equal outcomes and at quota",
		Long: `Runs, one after another on the same Redis and under the same per-tenant quota:
the gate with group commit and without, and in Counter mode, the
transaction-pipeline and plain Lua sliding windows of the design notes, a
fixed-window counter, go-redis/redis_rate, bare asynq Enqueue and
enqueue.Client.Enqueue.

It runs them twice. First at equal outcomes: a limit of 100,000 per
--window (or --limit, if larger), which no tenant reaches, so every
contender admits every call; the ratios against the gate, and Counter mode
beside Log mode, come from this run. Then at --limit, where the gate defers
and rejects (some of it locally, without Redis) while the others reject: a
section of its own, whose outcomes differ. It ends with one tenant
flooding at --flood times its quota, for the deny cache.

Each is measured for --duration with --concurrency callers in a closed loop
over --tenants tenants (uniform, or --zipf), in --rounds slices taken in turn
with the other contenders, each slice after --warmup on empty keys. For each it prints
decisions/s, p50 and p99, script calls per decision and Redis's µs per script
call (INFO commandstats), Redis CPU per decision (INFO cpu), bytes per log
entry (MEMORY USAGE over ZCARD of sampled logs) and the outcomes; then each
one's Redis ceiling, the decisions/s at which Redis would spend a whole core
on it, and how busy Redis was; and last the ratios against the gate and
admitq's targets.

Without --redis (or ADMITQ_REDIS), bench starts a throwaway redis-server on
a free loopback port and removes it afterwards. On your own Redis it writes
only keys under admitq-bench:, rate:admitq-bench: and asynq's queue
admitq-bench, and removes them with SCAN and UNLINK; other traffic on the
server skews the Redis-side figures. --prefix does not apply.

--redis-cluster alone starts a throwaway Redis Cluster of 3 masters instead
(--redis-cluster=host:port,... measures on yours). Every contender's keys
carry the tenant as hash tag, so all of them run there; bench then also
prints each master's Redis CPU per decision, how the tenants spread over the
masters, and the decisions/s at which the busiest master would fill a core.

--only dispatch runs fair dispatch (worker.Config{Gate, Fair: true} with
enqueue.Client producers) against bare asynq (asynq.Client and a plain
asynq.Server) with real workers on one Redis (or, with --redis-cluster, on
a Redis Cluster: the queue's keys share one slot, the gate's spread by
tenant, and Redis CPU and commands are summed over the masters), and
prints each figure as a ratio: Redis CPU and commands per task and the
drain rate of a backlog (0, 1 and 20 ms tasks of one tenant, and no-op
tasks of 500 tenants taking turns), Enqueue calls/s, a light tenant's wait
beside a backlog in task times, how much of its cap a capped tenant uses
(alone, and in a busy queue with equal task times and with task times
spread ±25%), and a lone tenant's drain rate. --tasks sets each drain's
backlog (5,000; 1,500 at 20 ms), --runs repeats it and prints each ratio's
spread; --mix adds each drain's Redis commands per task, fair and bare,
with their µs (INFO commandstats).

--only flow runs concurrency keys and pause on a fair pool of --concurrency
workers (64), each part against the same work without them: --tenants
tenants (1,000) with tasks of 10 ms carrying a key capped at --key-cap (20)
beside tasks carrying none (the most of the key's tasks running at once,
the pool's busy share, the keyless tasks' throughput); Redis CPU and
commands per task with one and with three keys on every task; and a paused
tenant's 10,000 waiting tasks resumed (the time to drain them, and how far
they started from enqueue order). It exits 1 when an invariant broke (the
key above its cap, a task lost or run twice, a paused tenant's task
running, a tenant capped at 1 out of order). --scale multiplies its task
counts; --runs repeats it. With --redis-cluster it runs on a Redis Cluster
as --only dispatch does.

Exit status: 0 done, 1 error (or, with --check, a target not met), 2 bad usage.`,
		Example: `  admitq bench
  admitq bench --redis redis://127.0.0.1:6379 --duration 10s --json > bench.json
  admitq bench --only gate-batched,redis-rate --zipf 1.1
  admitq bench --redis-cluster --only gate-batched,plain-lua,redis-rate`,
		Args: func(cmd *cobra.Command, args []string) error {
			// bench's --redis-cluster may come alone, so in "--redis-cluster
			// host:port,..." the nodes arrive as an argument.
			if len(args) == 1 && a.redisCluster == startClusterFlag {
				a.redisCluster = args[0]
				return nil
			}
			return cobra.NoArgs(cmd, args)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case runs < 1:
				return usageErrorf("--runs %d: want at least 1", runs)
			case cfg.Concurrency < 1:
				return usageErrorf("--concurrency %d: want at least 1", cfg.Concurrency)
			case cfg.Tenants < 1:
				return usageErrorf("--tenants %d: want at least 1", cfg.Tenants)
			case cfg.Duration <= 0:
				return usageErrorf("--duration %v: want more than 0", cfg.Duration)
			case cfg.Rounds < 1:
				return usageErrorf("--rounds %d: want at least 1", cfg.Rounds)
			case cfg.Warmup < 0:
				return usageErrorf("--warmup %v: want 0 or more", cfg.Warmup)
			case cfg.Zipf != 0 && cfg.Zipf <= 1:
				return usageErrorf("--zipf %v: want 0 (uniform) or an exponent above 1", cfg.Zipf)
			case cfg.FloodFactor < 1:
				return usageErrorf("--flood %d: want at least 1", cfg.FloodFactor)
			case window%time.Millisecond != 0:
				return usageErrorf("--window %v: want whole milliseconds", window)
			}
			cfg.Quota = admission.Quota{Limit: limit, Window: window, MaxDelay: maxWait}
			if err := cfg.Quota.Validate(); err != nil {
				return usageError(fmt.Errorf("--limit, --window, --max-delay: %w", err))
			}
			if cfg.Warmup == 0 {
				cfg.Warmup = -1 // bench.Config: negative is none, 0 the default
			}
			if !slices.Contains(cfg.Only, bench.Flow) {
				for _, f := range []string{"scale", "key-cap"} {
					if cmd.Flags().Changed(f) {
						return usageErrorf("--%s: only --only %s takes it", f, bench.Flow)
					}
				}
			}
			if !slices.Contains(cfg.Only, bench.Dispatch) {
				for _, f := range []string{"mix", "tasks"} {
					if cmd.Flags().Changed(f) {
						return usageErrorf("--%s: only --only %s takes it", f, bench.Dispatch)
					}
				}
			} else if tasks < 1 {
				return usageErrorf("--tasks %d: want at least 1", tasks)
			}
			if slices.Contains(cfg.Only, bench.Flow) {
				switch {
				case len(cfg.Only) > 1:
					return usageErrorf("--only %s: the flow-control scenario runs alone", strings.Join(cfg.Only, ","))
				case !(scale > 0) || scale > 100:
					return usageErrorf("--scale %v: want above 0, at most 100", scale)
				case flow.KeyCap < 1:
					return usageErrorf("--key-cap %d: want at least 1", flow.KeyCap)
				}
				flow.Runs = runs
				return a.benchFlow(cmd, cfg, flow, scale, asJSON)
			}
			if slices.Contains(cfg.Only, bench.Dispatch) {
				if len(cfg.Only) > 1 {
					return usageErrorf("--only %s: the dispatcher scenario runs alone", strings.Join(cfg.Only, ","))
				}
				return a.benchDispatch(cmd, cfg, runs, tasks, mix, asJSON)
			}
			if cmd.Flags().Changed("runs") {
				return usageErrorf("--runs: only --only %s takes it, and --only %s (the other modes spread noise with --rounds)", bench.Dispatch, bench.Flow)
			}
			if slices.Contains(cfg.Only, bench.Neighbour) {
				if len(cfg.Only) > 1 {
					return usageErrorf("--only %s: the noisy-neighbour scenario runs alone", strings.Join(cfg.Only, ","))
				}
				if a.redisCluster != "" {
					return usageErrorf("--only %s: the noisy-neighbour scenario runs on one Redis server; give --redis, not --redis-cluster", bench.Neighbour)
				}
				return a.benchNeighbour(cmd, cfg, asJSON)
			}
			known := bench.Contenders()
			for _, id := range cfg.Only {
				if !slices.Contains(known, id) {
					return usageErrorf("--only %s: unknown contender, want some of %s", id, strings.Join(known, ","))
				}
			}

			var err error
			if cfg.Redis, cfg.Cluster, cfg.StartCluster, err = a.benchTarget(cmd); err != nil {
				return err
			}
			if isTerminal(a.stderr) {
				cfg.Progress = a.benchProgress
			}
			rep, err := bench.Run(cmd.Context(), cfg)
			if cfg.Progress != nil {
				fmt.Fprint(a.stderr, "\r\x1b[K")
			}
			err = noRedisServer(err)
			if len(rep.Rows) > 0 { // an interrupted run still shows what it measured
				var werr error
				if asJSON {
					werr = writeJSON(a.stdout, rep, true)
				} else {
					werr = rep.WriteText(a.stdout)
				}
				if err == nil {
					err = werr
				}
			}
			if err != nil {
				return err
			}
			var failed []string
			for _, row := range rep.Rows {
				if row.Errors > 0 {
					failed = append(failed, fmt.Sprintf("%s (%d errors)", row.Name, row.Errors))
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("bench: calls failed: %s", strings.Join(failed, ", "))
			}
			if check {
				var unmet []string
				for _, t := range rep.Targets {
					if !t.Met {
						unmet = append(unmet, fmt.Sprintf("%s: %s, want %s", t.What, t.Got, t.Want))
					}
				}
				if len(unmet) > 0 {
					return fmt.Errorf("bench: targets not met: %s", strings.Join(unmet, "; "))
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Concurrency, "concurrency", 64, "callers, each in a closed loop")
	f.IntVar(&cfg.Tenants, "tenants", 1000, "tenants the callers spread over")
	f.Float64Var(&cfg.Zipf, "zipf", 0, "pick tenants Zipf-distributed with this exponent (> 1); 0 picks them uniformly")
	f.IntVar(&limit, "limit", 100, "quota of the at-quota run: admissions per --window, per tenant, for every contender")
	f.DurationVar(&window, "window", time.Second, "quota: the window")
	f.DurationVar(&maxWait, "max-delay", 0, "quota: how far ahead the gate may defer (the others can only reject)")
	f.DurationVar(&cfg.Duration, "duration", 5*time.Second, "measured time per contender, in all")
	f.IntVar(&cfg.Rounds, "rounds", 3, "slices each contender's --duration is run in, round-robin with the others, to spread out noise")
	f.DurationVar(&cfg.Warmup, "warmup", 500*time.Millisecond, "unmeasured time before each slice")
	f.IntVar(&cfg.FloodFactor, "flood", 20, "the flood row's offered load, as a multiple of the quota")
	f.StringSliceVar(&cfg.Only, "only", nil, "run only these contenders: "+strings.Join(bench.Contenders(), ",")+"; or "+bench.Neighbour+", the noisy-neighbour scenario with real workers; or "+bench.Dispatch+", fair dispatch against bare asynq with real workers; or "+bench.Flow+", concurrency keys and pause with real workers")
	f.BoolVar(&mix, "mix", false, "with --only "+bench.Dispatch+": also print each drain's Redis commands per task, fair and bare (INFO commandstats)")
	f.IntVar(&tasks, "tasks", bench.DefaultDispatchTasks, "with --only "+bench.Dispatch+": each drain's backlog (the 20 ms drain's is 1,500)")
	f.IntVar(&runs, "runs", 1, "with --only "+bench.Dispatch+" or "+bench.Flow+": run the scenario this many times and print each ratio's spread")
	f.Float64Var(&scale, "scale", 1, "with --only "+bench.Flow+": multiply the scenario's task counts (and tenants, unless --tenants is given)")
	f.IntVar(&flow.KeyCap, "key-cap", 20, "with --only "+bench.Flow+": the shared concurrency key's MaxInFlight")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.BoolVar(&check, "check", false, "exit 1 when a target is not met")
	// Shadows the global flag, so that it may come without a value.
	f.StringVar(&a.redisCluster, "redis-cluster", "", "measure on a Redis Cluster: alone, a throwaway one of 3 masters; =host:port,..., yours")
	f.Lookup("redis-cluster").NoOptDefVal = startClusterFlag
	return cmd
}

// benchDispatch runs `bench --only dispatch`: fair dispatch against bare
// asynq with real workers, --runs times. --concurrency sets the pool that
// drains the backlogs (64 unless given).
func (a *app) benchDispatch(cmd *cobra.Command, cfg bench.Config, runs, tasks int, mix, asJSON bool) error {
	dc := bench.DispatchConfig{Runs: runs, Tasks: tasks, Mix: mix}
	if cmd.Flags().Changed("concurrency") {
		dc.Concurrency = cfg.Concurrency
	}
	var err error
	if dc.Redis, dc.Cluster, dc.StartCluster, err = a.benchTarget(cmd); err != nil {
		return err
	}
	dc.Progress = a.scenarioProgress("dispatch")
	rep, err := bench.RunDispatch(cmd.Context(), dc)
	if dc.Progress != nil {
		fmt.Fprint(a.stderr, "\r\x1b[K")
	}
	if err != nil {
		return noRedisServer(err)
	}
	if asJSON {
		return writeJSON(a.stdout, rep, true)
	}
	return rep.WriteText(a.stdout)
}

// benchTarget is the Redis bench measures on: the server --redis (or
// ADMITQ_REDIS) names, the cluster --redis-cluster names, a throwaway
// cluster for --redis-cluster alone (start), or, when all are zero, a
// throwaway server. A named one has answered a ping.
func (a *app) benchTarget(cmd *cobra.Command) (single *redis.Options, cluster *redis.ClusterOptions, start bool, err error) {
	switch {
	case a.redisCluster == startClusterFlag:
		if a.redisURL != "" {
			return nil, nil, false, usageErrorf("--redis and --redis-cluster: give one")
		}
		return nil, nil, true, nil
	case a.redisURLOrEnv() != "" || a.redisCluster != "":
		rc, err := a.redisConfig()
		if err != nil {
			return nil, nil, false, err
		}
		if err := ping(cmd.Context(), rc, a.timeout); err != nil {
			return nil, nil, false, err
		}
		return rc.single, rc.cluster, false, nil
	}
	return nil, nil, false, nil
}

// noRedisServer says how to get a Redis when bench found no redis-server to
// start; other errors pass unchanged.
func noRedisServer(err error) error {
	if errors.Is(err, bench.ErrNoRedisServer) {
		return fmt.Errorf("bench needs a Redis: pass --redis URL (or set ADMITQ_REDIS), or install redis-server (apt-get install redis-server) so bench can start a throwaway one")
	}
	return err
}

// startClusterFlag is --redis-cluster given without nodes: bench starts its
// own cluster.
const startClusterFlag = "start"

// benchProgress redraws one status line on the terminal.
func (a *app) benchProgress(p bench.Progress) {
	phase := "measuring"
	if p.Warmup {
		phase = "warming up"
	}
	line := fmt.Sprintf("round %d/%d, %d/%d %s: %s %v of %v", p.Round+1, p.Rounds, p.Index+1, p.Total, p.Name, phase,
		p.Elapsed.Round(100*time.Millisecond), p.Duration)
	if !p.Warmup && p.Elapsed > 0 {
		line += fmt.Sprintf(", %.0f decisions/s", float64(p.Decisions)/p.Elapsed.Seconds())
	}
	fmt.Fprintf(a.stderr, "\r\x1b[K%s", line)
}
