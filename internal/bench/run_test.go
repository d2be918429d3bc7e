package bench

import (
	"context"
	"encoding/json"
	"math"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

func shortConfig(opts *redis.Options) Config {
	return Config{
		Redis:       opts,
		Concurrency: 8,
		// About a hundred decisions per tenant and second: some admitted,
		// some rejected.
		Tenants:  300,
		Quota:    admission.Quota{Limit: 100, Window: time.Second},
		Duration: 300 * time.Millisecond,
		Warmup:   100 * time.Millisecond,
	}
}

// TestRunReportsEveryContender runs every contender briefly on a Redis that
// holds someone else's data, and checks that each row is sane, that the
// report survives JSON and that only the bench's own keys were touched.
func TestRunReportsEveryContender(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	// Someone else's keys, including ones that look like ours at a glance.
	theirs := []string{"admitq:{t1}:log", "admitq-benchmark", "rate:other", "asynq:{default}:pending"}
	for _, k := range theirs {
		if err := rdb.Set(ctx, k, "keep", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.SAdd(ctx, "asynq:queues", "default").Err(); err != nil {
		t.Fatal(err)
	}

	var progress []Progress
	cfg := shortConfig(srv.Options())
	cfg.Progress = func(p Progress) { progress = append(progress, p) }
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}

	if rep.AtQuota == nil {
		t.Fatal("no at-quota run in the report")
	}
	at := *rep.AtQuota
	var ids, equalIDs []string
	for _, row := range rep.Rows {
		equalIDs = append(equalIDs, row.ID)
		t.Run("equal/"+row.ID, func(t *testing.T) { checkRow(t, rep, row) })
	}
	for _, row := range at.Rows {
		ids = append(ids, row.ID)
		t.Run("at-quota/"+row.ID, func(t *testing.T) { checkRow(t, at, row) })
	}
	if diff := cmp.Diff(Contenders(), ids); diff != "" {
		t.Errorf("at-quota rows (-want,+got):\n%s", diff)
	}
	if diff := cmp.Diff(slices.DeleteFunc(Contenders(), func(id string) bool { return id == "gate-flood" }), equalIDs); diff != "" {
		t.Errorf("equal-outcome rows (-want,+got):\n%s", diff)
	}
	if len(rep.Ratios) != len(rep.Rows)-1 { // not the gate itself
		t.Errorf("%d ratios for %d equal-outcome rows", len(rep.Ratios), len(rep.Rows))
	}
	if len(at.Ratios) != len(at.Rows)-2 { // not the gate itself, not the flood
		t.Errorf("%d ratios for %d at-quota rows", len(at.Ratios), len(at.Rows))
	}
	if rep.AdmitStandIn != "" {
		t.Errorf("a normal build measured %s, not admit.lua", rep.AdmitStandIn)
	}
	if len(rep.Targets) != 7 {
		t.Errorf("targets: %+v, want 7", rep.Targets)
	}
	if g, ok := rep.Row("gate-batched"); !ok || g.ZaddUsecPerRecorded <= 0 || g.ScriptUsecPerRecorded <= g.ZaddUsecPerRecorded {
		t.Errorf("gate: %.2fµs of script per admitted decision, %.2fµs of it ZADD; want both, the ZADD a part", g.ScriptUsecPerRecorded, g.ZaddUsecPerRecorded)
	}
	if len(progress) == 0 || progress[len(progress)-1].Index != len(at.Rows)-1 {
		t.Errorf("progress reached %+v, want the last row", progress[len(progress)-1:])
	}

	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rep, back); diff != "" {
		t.Errorf("report after a JSON round trip (-want,+got):\n%s", diff)
	}
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	if _, ok := generic["rows"].([]any)[0].(map[string]any)["decisions_per_sec"]; !ok {
		t.Errorf("JSON rows lack decisions_per_sec: %s", b)
	}

	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"gate (batched)", "go-redis/redis_rate", "against the gate", "targets", "Counter mode: ", "== " + OutcomesEqual, "== " + OutcomesAtQuota, "Redis's ceiling", "3× its measured rate would take ≤ ", "Enqueue at its ceiling: "} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	t.Logf("\n%s", text.String())

	left, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	want := append(slices.Clone(theirs), "asynq:queues")
	slices.Sort(want)
	if diff := cmp.Diff(want, left); diff != "" {
		t.Errorf("keys after the run (-want,+got):\n%s", diff)
	}
	if qs := rdb.SMembers(ctx, "asynq:queues").Val(); !slices.Equal(qs, []string{"default"}) {
		t.Errorf("asynq:queues = %q, want only the queue that was there", qs)
	}
}

func checkRow(t *testing.T, rep Report, row Row) {
	t.Helper()
	if row.Decisions <= 0 {
		t.Fatalf("%d decisions (errors %d: %s)", row.Decisions, row.Errors, row.FirstError)
	}
	if row.Errors != 0 {
		t.Errorf("%d errors, first: %s", row.Errors, row.FirstError)
	}
	if got := row.Admitted + row.Deferred + row.Rejected; got != row.Decisions {
		t.Errorf("outcomes add up to %d, want %d decisions", got, row.Decisions)
	}
	if row.Admitted == 0 && row.ID != "gate-flood" { // the flood's warmup may take the whole window
		t.Errorf("nothing admitted")
	}
	if row.PerSecond <= 0 || row.Seconds < rep.Duration.Seconds()*0.9 {
		t.Errorf("%.0f decisions/s over %.3fs", row.PerSecond, row.Seconds)
	}
	if !(0 < row.P50 && row.P50 <= row.P99 && row.P99 <= row.P999 && row.P999 <= row.Max) {
		t.Errorf("latencies p50 %v p99 %v p999 %v max %v are not ordered", row.P50, row.P99, row.P999, row.Max)
	}
	switch row.ID {
	case "tx-pipeline", "fixed-window":
		if row.ScriptCallsPerDecision != 0 {
			t.Errorf("%.3f script calls per decision, want 0", row.ScriptCallsPerDecision)
		}
	case "gate-flood":
		if row.Rejected == 0 || row.Local == 0 {
			t.Errorf("flood: %d rejected, %d local: the deny cache was not exercised", row.Rejected, row.Local)
		}
	default:
		if row.ScriptCallsPerDecision <= 0 || row.ScriptUsecPerCall <= 0 {
			t.Errorf("script calls per decision %.3f, µs per call %.2f, want both above 0", row.ScriptCallsPerDecision, row.ScriptUsecPerCall)
		}
	}
	if row.RedisCPUPerDecision <= 0 || row.ClientCPUPerDecision <= 0 {
		t.Errorf("CPU per decision: Redis %.2fµs, client %.2fµs, want both above 0", row.RedisCPUPerDecision, row.ClientCPUPerDecision)
	}
	// Redis cannot have spent more than its one core on the run.
	if row.RedisCeiling <= 0 || math.Abs(row.RedisCeiling*row.RedisCPUPerDecision/1e6-1) > 1e-9 || row.PerSecond > row.RedisCeiling*1.05 {
		t.Errorf("Redis ceiling %.0f decisions/s at %.2fµs per decision and %.0f measured", row.RedisCeiling, row.RedisCPUPerDecision, row.PerSecond)
	}
	switch row.ID {
	case "gate-batched", "gate-unbatched", "tx-pipeline", "plain-lua", "enqueue", "gate-flood":
		// A log entry costs more than its ID and less than a kilobyte.
		if row.BytesPerEntry < 10 || row.BytesPerEntry > 1000 || row.LogKeysSampled == 0 {
			t.Errorf("%.1f bytes per entry over %d keys", row.BytesPerEntry, row.LogKeysSampled)
		}
	default:
		if row.BytesPerEntry != 0 {
			t.Errorf("%.1f bytes per entry for a contender that keeps no log", row.BytesPerEntry)
		}
	}
}

// TestEqualOutcomesAdmitEverything: in the equal-outcome run every
// contender admits every call (the ratios compare like with like), and
// the report labels both runs and gives Counter mode's Redis time per
// decision beside Log mode's from the equal-outcome run.
func TestEqualOutcomesAdmitEverything(t *testing.T) {
	srv := redistest.Start(t)
	cfg := shortConfig(srv.Options())
	cfg.Only = []string{"gate-batched", "gate-counter", "plain-lua", "redis-rate", "fixed-window", "tx-pipeline", "asynq", "enqueue"}
	cfg.Quota.Limit = 2 // so that the at-quota run meets it
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Outcomes != OutcomesEqual || rep.Quota.Limit < EqualLimit || rep.AtQuota == nil ||
		rep.AtQuota.Outcomes != OutcomesAtQuota || rep.AtQuota.Quota.Limit != cfg.Quota.Limit {
		t.Fatalf("runs: %q at limit %d, then %+v", rep.Outcomes, rep.Quota.Limit, rep.AtQuota)
	}
	if len(rep.Rows) != len(cfg.Only) {
		t.Fatalf("%d equal-outcome rows, want %d", len(rep.Rows), len(cfg.Only))
	}
	for _, row := range rep.Rows {
		if row.Decisions == 0 || row.Admitted != row.Decisions || row.Local != 0 {
			t.Errorf("%s: %d of %d decisions admitted (%d local), want all, by Redis", row.ID, row.Admitted, row.Decisions, row.Local)
		}
	}
	// The at-quota run is where outcomes differ: 8 callers over 300
	// tenants at 2 per second each meet the quota.
	if g, ok := rep.AtQuota.Row("gate-batched"); !ok || g.Admitted == g.Decisions {
		t.Errorf("at quota the gate admitted %d of %d: the run did not reach the quota", g.Admitted, g.Decisions)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	eq, _, _ := strings.Cut(text.String(), "== "+OutcomesAtQuota)
	if !strings.Contains(eq, "Counter mode: ") || !strings.Contains(eq, "Log mode (gate, batched)") {
		t.Errorf("the equal-outcome section lacks Counter mode beside Log mode:\n%s", eq)
	}
}

// TestRunStartsItsOwnRedis runs one contender without a Redis: Run starts
// redis-server and stops it.
func TestRunStartsItsOwnRedis(t *testing.T) {
	redistest.RequireRedis(t)
	cfg := shortConfig(nil)
	cfg.Only = []string{"gate-batched"}
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Redis.Embedded || rep.Redis.Version == "" || len(rep.Rows) != 1 || rep.Rows[0].Decisions == 0 {
		t.Fatalf("report %+v", rep)
	}
	if c, err := net.Dial("tcp", rep.Redis.Addr); err == nil {
		c.Close()
		t.Errorf("redis-server at %s still listens after Run", rep.Redis.Addr)
	}
}

func TestConfigRejectsNonsense(t *testing.T) {
	for _, tc := range []struct {
		desc string
		cfg  Config
		want string
	}{
		{"negative concurrency", Config{Concurrency: -1}, "Concurrency"},
		{"zipf exponent at most 1", Config{Zipf: 0.5}, "Zipf"},
		{"unknown contender", Config{Only: []string{"nope"}}, `unknown contender "nope"`},
		{"window not in ms", Config{Quota: admission.Quota{Limit: 1, Window: 1500 * time.Microsecond}}, "whole milliseconds"},
		{"invalid quota", Config{Quota: admission.Quota{Limit: -2, Window: time.Second}}, "Limit"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run error %v, want one naming %q", err, tc.want)
			}
		})
	}
}
