// Package bench measures admitq's gate side by side with the alternatives,
// in one run on one Redis: the gate with and without group commit, the
// transaction-pipeline and plain Lua sliding windows of the design notes
// (written afresh here as baselines), a fixed-window counter,
// go-redis/redis_rate, and bare asynq Enqueue against enqueue.Client.Enqueue.
// A last row floods one tenant at many times its quota, for the deny cache.
// It backs the admitq bench command.
//
//	rep, err := bench.Run(ctx, bench.Config{Duration: 5 * time.Second})
//	if err != nil { ... }
//	rep.WriteText(os.Stdout)
//
// Every contender is driven the same way: Concurrency callers in a closed
// loop, each picking a tenant (uniformly, or Zipf-distributed) and asking
// for one decision, all under the same quota. Latencies go into per-caller
// log-linear histograms, so measuring takes no lock. Redis's side comes
// from differences of INFO commandstats and INFO cpu around each
// contender's measured span, and bytes per log entry from MEMORY USAGE over
// ZCARD of sampled tenants' logs. The bench writes only keys under Prefix
// (and redis_rate's and asynq's own names for them) and removes them
// with SCAN and UNLINK; it never flushes a database.
package bench
