package bench

import (
	"bufio"
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// serverStats is what the bench reads from INFO around a contender's run.
// It only ever takes differences of two snapshots: on a Redis it did not
// start, the bench must not CONFIG RESETSTAT someone else's counters.
type serverStats struct {
	cmds map[string]cmdStat // by command name, "evalsha", "zadd", ...
	cpu  float64            // used_cpu_user + used_cpu_sys, seconds
	// reads is total_reads_processed: the reads Redis made from its
	// clients' sockets, about one per request or pipeline received.
	reads int64
}

type cmdStat struct {
	calls, usec int64
}

// scriptCommands are the commands that run a script. Commands a script runs
// are counted again under their own names, so they are not summed with these.
var scriptCommands = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

func readStats(ctx context.Context, rdb *redis.Client) (serverStats, error) {
	s := serverStats{cmds: make(map[string]cmdStat)}
	// Two calls, not INFO cpu commandstats: Redis before 7 takes one section.
	cs, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return s, err
	}
	cpu, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return s, err
	}
	stats, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		return s, err
	}
	eachInfoLine(stats, func(k, v string) {
		if k == "total_reads_processed" {
			s.reads, _ = strconv.ParseInt(v, 10, 64)
		}
	})
	eachInfoLine(cs, func(k, v string) {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			return
		}
		var st cmdStat
		for _, kv := range strings.Split(v, ",") {
			f, val, _ := strings.Cut(kv, "=")
			switch f {
			case "calls":
				st.calls, _ = strconv.ParseInt(val, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseInt(val, 10, 64)
			}
		}
		s.cmds[name] = st
	})
	eachInfoLine(cpu, func(k, v string) {
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			s.cpu += f
		}
	})
	return s, nil
}

func eachInfoLine(info string, f func(k, v string)) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			f(k, v)
		}
	}
}

// scriptDelta returns the script calls between two snapshots and the Redis
// time they took, µs.
func scriptDelta(before, after serverStats) (calls, usec int64) {
	for _, c := range scriptCommands {
		calls += after.cmds[c].calls - before.cmds[c].calls
		usec += after.cmds[c].usec - before.cmds[c].usec
	}
	return calls, usec
}

// redisVersion returns the server's redis_version, or "" when INFO does not
// say.
func redisVersion(ctx context.Context, rdb redis.UniversalClient) string {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return ""
	}
	var v string
	eachInfoLine(info, func(k, val string) {
		if k == "redis_version" {
			v = val
		}
	})
	return v
}

// logMemory samples MEMORY USAGE and ZCARD of the given sorted sets and
// returns their total bytes and entries, and how many of the keys held any.
// Keys that do not exist (a tenant that went idle) are skipped.
func logMemory(ctx context.Context, rdb redis.UniversalClient, keys []string) (bytes, entries int64, sampled int, err error) {
	pipe := rdb.Pipeline()
	mem := make([]*redis.IntCmd, len(keys))
	card := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		mem[i] = pipe.MemoryUsage(ctx, k, 0) // SAMPLES 0: every element, exact
		card[i] = pipe.ZCard(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return 0, 0, 0, err
	}
	for i := range keys {
		n, m := card[i].Val(), mem[i].Val()
		if n == 0 || m == 0 {
			continue
		}
		bytes += m
		entries += n
		sampled++
	}
	return bytes, entries, sampled, nil
}

// unlinkMatching removes every key that matches one of the patterns, with
// SCAN and UNLINK, never FLUSHDB: the Redis may hold other people's data.
// On a cluster it does so on every master.
func unlinkMatching(ctx context.Context, rdb redis.UniversalClient, patterns ...string) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return unlinkOn(ctx, node, patterns...)
		})
	}
	return unlinkOn(ctx, rdb, patterns...)
}

// unlinkOn unlinks the matching keys of one server one key per UNLINK,
// pipelined: on a cluster node a multi-key UNLINK fails across slots.
func unlinkOn(ctx context.Context, rdb redis.UniversalClient, patterns ...string) error {
	for _, p := range patterns {
		iter := rdb.Scan(ctx, 0, p, 1000).Iterator()
		batch := make([]string, 0, 500)
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == cap(batch) {
				if err := unlinkEach(ctx, rdb, batch); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(batch) > 0 {
			if err := unlinkEach(ctx, rdb, batch); err != nil {
				return err
			}
		}
	}
	return nil
}

func unlinkEach(ctx context.Context, rdb redis.UniversalClient, keys []string) error {
	pipe := rdb.Pipeline()
	for _, k := range keys {
		pipe.Unlink(ctx, k)
	}
	_, err := pipe.Exec(ctx)
	return err
}
