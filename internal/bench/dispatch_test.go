package bench

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/internal/worktime"
	"github.com/admitq/admitq/lua"
)

// TestRunDispatchTiny runs the whole dispatcher scenario with a few tasks
// on a Redis that holds someone else's data: every figure is measured and
// sane, a cap is never exceeded, the report survives JSON and prints (and
// names the stand-in of a benchmark build), and only the bench's own keys
// were touched.
func TestRunDispatchTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("about 20 s of real workers")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	writeTheirs(t, rdb)

	var steps []string
	rep, err := RunDispatch(ctx, DispatchConfig{
		Redis: srv.Options(), Tasks: 60, SlowTasks: 30, Tenants: 10, Concurrency: 8, Workers: 6, Producers: 4, EnqueueFor: 100 * time.Millisecond,
		Light: 2, Every: 2, LightFor: 500 * time.Millisecond, CapTasks: 24, MaxInFlight: 2, Mix: true,
		Progress: func(s string) { steps = append(steps, s) },
	})
	if err != nil {
		t.Fatal(err)
	}

	names := measured(t, rep)
	withBare := func(prefix string, want bool) {
		for _, m := range rep.Measures {
			if strings.HasPrefix(m.Name, prefix) && (len(m.Bare) == 1) != want {
				t.Errorf("%s: bare %v, want a bare value: %v", m.Name, m.Bare, want)
			}
		}
	}
	withBare("Redis CPU", true)
	withBare("drain rate", true)
	withBare("Enqueue rate", true)
	withBare("lone tenant", true)
	withBare("light wait", false)
	withBare("capped", false)
	lean := lua.DispatchStandIn() != ""
	switch {
	case lean && len(names) != 4*3+2+2:
		t.Errorf("measures %q with the dispatcher's stand-ins: want 3 per drain (0, 1, 20 ms, and many tenants), 2 producer, 2 lone", names)
	case !lean && len(names) != 4*3+2+3*3+4+2:
		t.Errorf("measures %q: want 3 per drain (0, 1, 20 ms, and many tenants), 2 producer, 3 per light run, 4 capped, 2 lone", names)
	}
	if figure(t, rep, "Redis commands per task, 0 ms tasks of 10 tenants") <= 0 {
		t.Error("the drain of many tenants counted no commands")
	}
	for _, task := range []string{"5 ms", "20 ms", "200 ms"} {
		if lean {
			break
		}
		p50, p99, max := figure(t, rep, "light wait p50, "+task+" tasks"), figure(t, rep, "light wait p99, "+task+" tasks"), figure(t, rep, "light wait max, "+task+" tasks")
		if !(p50 <= p99 && p99 <= max) {
			t.Errorf("light waits at %s: p50 %.2f, p99 %.2f, max %.2f task times, want in order", task, p50, p99, max)
		}
	}
	var drains []string
	for _, m := range rep.Mixes {
		drains = append(drains, m.Drain)
		// bare asynq's drain runs its scripts (enqueue, dequeue, done),
		// the fair one the dispatcher's too
		if !strings.Contains(m.Bare, "evalsha ") || !strings.Contains(m.Fair, "evalsha ") || m.Fair == m.Bare {
			t.Errorf("%s: commands fair %q, bare %q", m.Drain, m.Fair, m.Bare)
		}
	}
	if want := []string{"0 ms tasks", "1 ms tasks", "20 ms tasks", "0 ms tasks of 10 tenants"}; !slices.Equal(drains, want) {
		t.Errorf("command mixes of drains %q, want %q", drains, want)
	}
	if len(steps) == 0 || !strings.Contains(steps[len(steps)-1], "with 6 workers") {
		t.Errorf("progress ended at %q, want the lone tenant's drain on the 6 workers", steps[len(steps)-1:])
	}

	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back DispatchReport
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rep.Measures, back.Measures); diff != "" {
		t.Errorf("measures after a JSON round trip (-want,+got):\n%s", diff)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, n := range append(names, "0 ms tasks of 10 tenants, fair: ") {
		if !strings.Contains(text.String(), n) {
			t.Errorf("text report lacks %q:\n%s", n, text.String())
		}
	}
	if standIn := lua.FrontStandIn(); rep.FrontStandIn != standIn || (standIn != "") != strings.Contains(text.String(), "fronts replaced by "+standIn) {
		t.Errorf("the report names %q as the stand-in for fronts, this build runs %q:\n%s", rep.FrontStandIn, standIn, text.String())
	}
	if standIn := lua.DispatchStandIn(); rep.DispatchStandIn != standIn || (standIn != "") != strings.Contains(text.String(), "turn replaced by "+standIn) {
		t.Errorf("the report names %q as the stand-in for the park and the turn, this build runs %q:\n%s", rep.DispatchStandIn, standIn, text.String())
	}
	t.Logf("\n%s", text.String())

	onlyTheirsLeft(t, rdb)
}

// measured checks that rep has one value of each measure, every value
// above 0 and finite, and no capped tenant above its cap, and returns the
// measures' names.
func measured(t *testing.T, rep DispatchReport) []string {
	t.Helper()
	var names []string
	for _, m := range rep.Measures {
		names = append(names, m.Name)
		if len(m.Fair) != 1 {
			t.Errorf("%s: fair %v, want one value", m.Name, m.Fair)
		}
		for _, v := range append(slices.Clone(m.Fair), m.Bare...) {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Errorf("%s: fair %v, bare %v: want every value above 0 and finite", m.Name, m.Fair, m.Bare)
			}
		}
		if m.Unit == "of cap" && m.Fair[0] > 1 {
			t.Errorf("%s: %.2f of the cap running on average, want at most all of it", m.Name, m.Fair[0])
		}
	}
	return names
}

// TestRunDispatchOnACluster runs the dispatcher scenario, tiny, on a Redis
// Cluster of 3 masters that holds someone else's data: every figure is
// measured, the commands are counted on every master (the gate's keys
// spread by tenant, the queue's share one slot), the report says where it
// ran, and only the bench's own keys were touched.
func TestRunDispatchOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("about 20 s of real workers")
	}
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	ctx := t.Context()
	writeTheirs(t, rdb)
	before, err := readAll(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}

	rep, err := RunDispatch(ctx, DispatchConfig{
		Cluster: c.Options(), Tasks: 60, SlowTasks: 30, Tenants: 10, Concurrency: 8, Workers: 6, Producers: 4, EnqueueFor: 100 * time.Millisecond,
		Light: 2, Every: 2, LightFor: 500 * time.Millisecond, CapTasks: 24, MaxInFlight: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	measured(t, rep)
	if rep.Masters != 3 {
		t.Errorf("report: %d masters, want 3", rep.Masters)
	}
	after, err := readAll(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	for addr, s := range after {
		if calls := s.cmds["evalsha"].calls - before[addr].cmds["evalsha"].calls; calls == 0 {
			t.Errorf("master %s ran no scripts: the gate's keys did not spread over the masters", addr)
		}
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "on a Redis Cluster of 3 masters") {
		t.Errorf("text report does not say it ran on the cluster:\n%s", text.String())
	}
	t.Logf("\n%s", text.String())

	onlyTheirsLeft(t, rdb)
}

// theirKeys are someone else's keys on the Redis a scenario runs on.
var theirKeys = []string{"admitq-benchmark", "asynq:{default}:pending"}

// writeTheirs writes theirKeys.
func writeTheirs(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	for _, k := range theirKeys {
		if err := rdb.Set(t.Context(), k, "keep", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// onlyTheirsLeft checks that theirKeys, untouched, are all the keys left
// on rdb, on every master of a cluster.
func onlyTheirsLeft(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	var (
		mu   sync.Mutex
		left []string
	)
	keys := func(ctx context.Context, node *redis.Client) error {
		ks, err := node.Keys(ctx, "*").Result()
		mu.Lock() // a cluster's masters answer at once
		defer mu.Unlock()
		left = append(left, ks...)
		return err
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(t.Context(), keys)
	} else {
		err = keys(t.Context(), rdb.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	if diff := cmp.Diff(theirKeys, left); diff != "" {
		t.Errorf("keys after the run (-want,+got):\n%s", diff)
	}
	for _, k := range theirKeys {
		if v, err := rdb.Get(t.Context(), k).Result(); err != nil || v != "keep" {
			t.Errorf("%s: %q, %v; want it as it was, \"keep\"", k, v, err)
		}
	}
}

func figure(t *testing.T, rep DispatchReport, name string) float64 {
	t.Helper()
	i := slices.IndexFunc(rep.Measures, func(m DispatchMeasure) bool { return m.Name == name })
	if i < 0 {
		t.Fatalf("no measure %q", name)
	}
	return rep.Measures[i].Fair[0]
}

// TestDispatchReportSpread checks the table of several runs: medians, the
// ratio's spread where bare asynq has a value, the value's where it has
// none.
func TestDispatchReportSpread(t *testing.T) {
	rep := DispatchReport{Config: DispatchConfig{Runs: 3}.withDefaults()}
	for _, r := range []struct{ fair, bare, cap float64 }{{30, 10, 0.7}, {40, 10, 0.75}, {33, 11, 0.9}} {
		rep.add("Redis CPU per task, 0 ms tasks", "µs", "≤ 2.0×", r.fair, r.bare)
		rep.add("capped at 4, alone: share of cap used", "of cap", "≥ 71%", r.cap)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(text.String(), "\n")
	for _, want := range [][]string{
		{"Redis CPU per task, 0 ms tasks", "33.0 µs", "10.0 µs", "3.00×", "3.00–4.00", "≤ 2.0×"},
		{"capped at 4, alone: share of cap used", "75%", "-", "-", "70–90%", "≥ 71%"},
	} {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, want[0]) })
		if i < 0 {
			t.Fatalf("no line for %q in:\n%s", want[0], text.String())
		}
		if got := strings.Fields(strings.TrimPrefix(lines[i], want[0])); !slices.Equal(got, strings.Fields(strings.Join(want[1:], " "))) {
			t.Errorf("line %q: got %q, want %q", want[0], got, want[1:])
		}
	}
}

// capShare is the exact mean of the tasks running over the cap, from the
// release until the end of the task after which only cap tasks were left:
// here two places, each running 9 ms of every 10 (0.9), then the last two
// tasks, which do not count; other tenants' runs do not either.
func TestCapShareIsTheExactMeanWhileTasksWait(t *testing.T) {
	at := time.Unix(1000, 0)
	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
	var runs []worktime.Run
	add := func(tenant string, start, end int) {
		runs = append(runs, worktime.Run{Tenant: tenant, Start: ms(start), End: ms(end)})
	}
	for place := range 2 {
		for i := range 10 {
			add("c", 10*i+place, 10*i+place+9)
		}
	}
	add("other", 0, 200)
	// The span ends with the 18th task of "c" to end, at 90 ms: 18 tasks of
	// 9 ms in it; the last two (90–99, 91–100) start after it.
	got := capShare(runs, "c", 2, at)
	if want := 18 * 9 / (2 * 90.0); math.Abs(got-want) > 1e-9 {
		t.Errorf("capShare = %.4f, want %.4f", got, want)
	}
	if got := capShare(runs[:2], "c", 2, at); got != 0 {
		t.Errorf("capShare of no more tasks than places = %v, want 0", got)
	}
}
