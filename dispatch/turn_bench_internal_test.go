package dispatch

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch/internal/rule"
)

// BenchmarkTurnSteps drains 3,000 waiting tasks of one tenant, or of 500
// taking turns, through a worker's turns of 32 grants, as a busy fair
// queue does, with each step in a call of its own: the move of the last
// turn's grants, the finishes of the tasks moved (asynq ran and deleted
// them), and the grants. It reports Redis's time a task in each step's
// calls (INFO commandstats) and, of all of it, the time in the commands
// the calls made: the rest is Lua and each redis.call's own cost.
//
//	go test -run '^$' -bench TurnSteps -benchtime 3x ./dispatch/
func BenchmarkTurnSteps(b *testing.B) {
	for _, tenants := range []int{1, 500} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			steps := map[string]int64{}
			var inner int64
			for range b.N {
				s, in := drainInTurns(b, tenants, 3000)
				for k, v := range s {
					steps[k] += v
				}
				inner += in
			}
			tasks := float64(3000 * b.N)
			var all int64
			for _, step := range []string{"grant", "finish", "move"} {
				b.ReportMetric(float64(steps[step])/tasks, step+"-µs/task")
				all += steps[step]
			}
			b.ReportMetric(float64(all)/tasks, "turn-µs/task")
			b.ReportMetric(float64(inner)/tasks, "commands-µs/task")
		})
	}
}

// drainInTurns parks n tasks of tenants tenants in turn and drains them as
// BenchmarkTurnSteps describes, returning the µs of each step's calls and
// of the commands they made.
func drainInTurns(b *testing.B, tenants, n int) (map[string]int64, int64) {
	b.StopTimer()
	ctx := context.Background()
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	d, rdb, ac := rig(b, q)
	k := d.keysFor("default")
	// a worker of concurrency 1 and three tasks pending: every park waits
	const member = "w|64|1"
	if _, err := d.run(ctx, d.scripts.dispatch, "default", "w|1|1", 3_000_000, 0, 0, 0, 0, 0); err != nil {
		b.Fatal(err)
	}
	for _, id := range []string{"f1", "f2", "f3"} {
		if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id)); err != nil {
			b.Fatal(err)
		}
	}
	for i := range n {
		id := "task" + strconv.Itoa(i)
		tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "tenant-" + strconv.Itoa(i%tenants), ID: id}, q)
		if err != nil || tk.Verdict != Wait {
			b.Fatalf("%s: %v %v", id, tk.Verdict, err)
		}
		if _, err := ac.Enqueue(asynq.NewTask("x", nil), asynq.TaskID(id), asynq.ProcessAt(ParkedUntil)); err != nil {
			b.Fatal(err)
		}
	}
	if err := rdb.LTrim(ctx, k.pending, 1, 0).Err(); err != nil { // the three ran
		b.Fatal(err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	steps := map[string]int64{}
	step := func(name string, args ...any) []any {
		_, before := commandStat(b, rdb, "fcall")
		b.StartTimer()
		res, err := d.run(ctx, d.scripts.dispatch, "default", append([]any{member, 3_000_000}, args...)...)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		_, after := commandStat(b, rdb, "fcall")
		steps[name] += after - before
		return res
	}
	var moved []string
	for done := 0; done < n; {
		ops := []any{0, 0, len(moved)}
		for _, id := range moved {
			ops = append(ops, opGo, id, 0)
		}
		step("move", append(ops, 0, 0)...)
		fin := []any{0, len(moved)}
		for _, id := range moved {
			// asynq ran it and deleted it (UNLINK and LREM: no command a
			// turn makes, so that the commands' time is the turn's)
			if err := rdb.Unlink(ctx, k.taskPrefix+id).Err(); err != nil {
				b.Fatal(err)
			}
			if err := rdb.LRem(ctx, k.pending, 1, id).Err(); err != nil {
				b.Fatal(err)
			}
			fin = append(fin, id, 1000, 1, -1, rule.WeightScale, 0, 0, "")
		}
		done += len(moved)
		step("finish", append(fin, 0, 0, 0)...)
		picks, _, err := readPicks(step("grant", 32, 0, 0, 0, 0))
		if err != nil {
			b.Fatal(err)
		}
		if len(picks) == 0 && done < n {
			b.Fatalf("%d of %d tasks drained and nothing granted", done, n)
		}
		moved = moved[:0]
		for _, p := range picks {
			moved = append(moved, p.entry.id)
		}
	}
	return steps, innerUsec(b, rdb)
}

// innerUsec sums the µs of the commands the scripts made, from INFO
// commandstats: every command but the calls themselves and the
// benchmark's own.
func innerUsec(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum int64
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch name {
		case "fcall", "unlink", "lrem", "info", "config", "hello", "client", "ping":
			continue
		}
		var calls, usec int64
		fmt.Sscanf(rest, "calls=%d,usec=%d", &calls, &usec)
		sum += usec
	}
	return sum
}
