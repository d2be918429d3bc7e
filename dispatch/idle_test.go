package dispatch_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
)

// With many tenants idle, a worker's background cost does not grow with
// them: a tenant with nothing waiting or in flight has no state in the
// dispatcher, and each worker's loop costs a few commands a second.
func TestIdleTenantsCostNothingInTheBackground(t *testing.T) {
	const tenants, workers = 1000, 4
	s := newStack(t, admission.Quota{Limit: 100_000, Window: time.Second, MaxInFlight: 2})
	w := s.startWorker(8, true)
	var ids []string
	for i := range tenants {
		ids = append(ids, s.enqueue("t"+strconv.Itoa(i), 1, time.Millisecond)...)
	}
	s.waitRuns(ids, 60*time.Second)
	ctx := context.Background()
	// Once nothing waits or runs, every tenant's record goes: those owing
	// worker time are forgiven when the queue goes idle.
	eventually(t, 5*time.Second, "no idle tenant keeps a record", func() bool {
		keys, err := s.rdb.Keys(ctx, "admitq:fair:{default}:t:*").Result()
		return err == nil && len(keys) == 0
	})
	// A whole idle worker: asynq's polling of the queue every 10 ms
	// (DefaultDispatchTaskCheckInterval) and its heartbeats, and the
	// dispatcher's loop.
	if err := s.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	t.Logf("an idle worker with a gate: %.0f Redis commands/s in all", float64(commandCalls(t, s))/3)
	w.Shutdown() // what is measured next is the dispatcher's own work, not asynq's polling
	for range workers {
		srv, err := dispatch.New(s.rdb, s.gate, nil).Serve(dispatch.Worker{Queues: []string{"default"}, Concurrency: 8, Fair: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Close)
	}
	time.Sleep(time.Second)
	if err := s.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const span = 5 * time.Second
	time.Sleep(span)
	calls := commandCalls(t, s)
	perWorker := float64(calls) / span.Seconds() / workers
	t.Logf("%d tenants idle: %.1f Redis commands/s per worker (all commands, scripts' inner ones included)", tenants, perWorker)
	if perWorker > 100 {
		t.Errorf("idle background cost is %.1f Redis commands/s per worker; want at most 100", perWorker)
	}
}

// commandCalls sums the calls of the named commands in INFO commandstats
// (those scripts make included), or of every command when none is named.
func commandCalls(t *testing.T, s *stack, names ...string) int {
	t.Helper()
	info, err := s.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, line := range strings.Split(info, "\n") {
		name, _, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !strings.HasPrefix(line, "cmdstat_") || !ok || len(names) > 0 && !slices.Contains(names, name) {
			continue
		}
		var calls int
		if i := strings.Index(line, "calls="); i >= 0 {
			fmt.Sscanf(line[i:], "calls=%d", &calls)
		}
		total += calls
	}
	return total
}

// Stats's cost does not grow with the tenants in flight either: a queue
// that is not fair may let in any number (here 10,000 tasks of as many
// tenants, each capped), and Stats lists at most StatsTenants of them, in
// a few hundred commands.
func TestStatsOfManyTenantsInFlightIsBounded(t *testing.T) {
	s := newStack(t, admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
	ctx := context.Background()
	const n = 10_000
	fill := make([]any, 0, 2*n)
	for i := range n {
		fill = append(fill, "task"+strconv.Itoa(i), "p|0|0|t"+strconv.Itoa(i))
	}
	if err := s.rdb.HSet(ctx, "admitq:fair:{default}:run", fill...).Err(); err != nil {
		t.Fatal(err)
	}
	d := dispatch.New(s.rdb, s.gate, nil)
	if err := s.rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	qs, err := d.Stats(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	calls := commandCalls(t, s) - 1 // the CONFIG RESETSTAT
	if len(qs.Tenants) == 0 || len(qs.Tenants) > dispatch.StatsTenants {
		t.Errorf("Stats listed %d tenants of %d in flight; want some, at most %d", len(qs.Tenants), n, dispatch.StatsTenants)
	}
	if calls > 1000 {
		t.Errorf("Stats made %d Redis commands for %d tenants in flight; want at most 1,000", calls, n)
	}
}
