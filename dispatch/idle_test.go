package dispatch_test

import (
	"context"
	"fmt"
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
	w.Shutdown() // what is measured is the dispatcher's own work, not asynq's polling
	ctx := context.Background()
	// An idle tenant's record is deleted, or expires within the hour when
	// it owes worker time; nothing walks them.
	keys, err := s.rdb.Keys(ctx, "admitq:fair:{default}:t:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ttl := s.rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > time.Hour {
			t.Fatalf("idle tenant record %s has TTL %v; want at most an hour", k, ttl)
		}
	}
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

// commandCalls sums the calls of every command in INFO commandstats.
func commandCalls(t *testing.T, s *stack) int {
	t.Helper()
	info, err := s.rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") {
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
