package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/admitq/admitq/internal/bench"
	"github.com/admitq/admitq/internal/redistest"
)

// TestBenchFlowUsage: bench --only flow and its flags refuse what they
// cannot run, with one line and the usage exit code, before touching Redis.
func TestBenchFlowUsage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		desc string
		args []string
		want string // in stderr
	}{
		{"flow beside contenders", []string{"bench", "--only", "flow,gate-batched"}, "the flow-control scenario runs alone"},
		{"flow beside dispatch", []string{"bench", "--only", "dispatch,flow"}, "the flow-control scenario runs alone"},
		{"flow on a server and a cluster", []string{"bench", "--redis", "127.0.0.1:1", "--redis-cluster", "--only", "flow"}, "--redis and --redis-cluster: give one"},
		{"no scale", []string{"bench", "--only", "flow", "--scale", "0"}, "--scale 0: want above 0"},
		{"no key cap", []string{"bench", "--only", "flow", "--key-cap", "0"}, "--key-cap 0: want at least 1"},
		{"no runs", []string{"bench", "--only", "flow", "--runs", "0"}, "--runs 0: want at least 1"},
		{"scale without flow", []string{"bench", "--only", "dispatch", "--scale", "2"}, "--scale: only --only flow takes it"},
		{"key cap without flow", []string{"bench", "--key-cap", "5"}, "--key-cap: only --only flow takes it"},
	} {
		t.Run(c.desc, func(t *testing.T) {
			res := admitq(t, c.args...)
			if res.code != exitUsage || !strings.Contains(res.stderr, c.want) {
				t.Errorf("%v\nwant exit %d and stderr holding %q", res, exitUsage, c.want)
			}
			oneLine(t, c.desc, res.stderr)
		})
	}
}

// TestBenchFlowTiny runs the flow scenario at a tiny size on real Redis
// and checks what it must hold whatever the timings: it completes, every
// figure is there, the key never ran above its cap, every task ran once,
// no paused task ran, the tenant capped at 1 started in order.
func TestBenchFlowTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("about 15 s of real workers")
	}
	benchFlowTiny(t, 0, "--redis", redistest.Start(t).URL())
}

// TestBenchFlowTinyOnACluster is TestBenchFlowTiny on a Redis Cluster of 3
// masters.
func TestBenchFlowTinyOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("about 15 s of real workers")
	}
	benchFlowTiny(t, 3, "--redis-cluster", strings.Join(redistest.StartCluster(t).Addrs(), ","))
}

// benchFlowTiny runs the tiny flow scenario on the Redis target names and
// checks it, and that the report names masters masters (0: one server).
func benchFlowTiny(t *testing.T, masters int, target ...string) {
	const keyCap = 3
	res := admitq(t, append(target, "bench", "--only", "flow", "--json",
		"--scale", "0.05", "--tenants", "12", "--concurrency", "8", "--key-cap", "3")...)
	if res.code != 0 {
		t.Fatalf("bench --only flow: %v", res)
	}
	var rep bench.FlowReport
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatalf("bench --only flow --json: %v\n%s", err, res.stdout)
	}
	if rep.Masters != masters {
		t.Errorf("report: %d masters, want %d", rep.Masters, masters)
	}
	if c := rep.Config; c.Tenants != 12 || c.Concurrency != 8 || c.KeyCap != keyCap || c.Paused != 500 || c.Ordered != 5 || c.CPUTasks != 150 || c.Runs != 1 {
		t.Errorf("config %+v: want 12 tenants, a pool of 8, a cap of 3, 500 paused, 5 ordered, 150 CPU tasks (0.05 of the defaults), 1 run", c)
	}
	if len(rep.Violations) > 0 || len(rep.Checks) != 4 {
		t.Errorf("checks %q, violations %q: want 4 checks, none violated", rep.Checks, rep.Violations)
	}
	got := map[string]bench.FlowMeasure{}
	for _, m := range rep.Measures {
		got[m.Name] = m
		if len(m.Value) != 1 || (m.Against != nil && len(m.Against) != 1) {
			t.Errorf("%s: value %v, against %v: want one run's", m.Name, m.Value, m.Against)
		}
	}
	for _, c := range []struct {
		name     string
		against  bool
		min, max float64
	}{
		{"key capped at 3: most of its tasks running at once", false, 1, keyCap},
		{"key capped at 3: most in flight by Stats (sampled)", false, 0, keyCap},
		{"key: share of its cap running while its tasks wait", false, 0, 1},
		{"key: share of its cap in flight by Stats while its tasks wait", false, 0, 1},
		{"pool busy while both kinds wait", true, 0, 1.05}, // a start and an end read on two clocks
		{"keyless tasks started while both kinds wait", true, 0, 1e9},
		{"Redis CPU per task, 1 key on each", true, 0, 1e9},
		{"Redis CPU per task, 3 keys on each", true, 0, 1e9},
		{"Redis commands per task, 3 keys on each", true, 0, 1e9},
		{"paused, 500 tasks of 5 ms: resume to last end", true, 0, 1e9},
		{"paused: pairs of its tasks started out of enqueue order", true, 0, 500 * 499 / 2},
	} {
		m, ok := got[c.name]
		switch {
		case !ok:
			t.Errorf("no measure %q in %q", c.name, res.stdout)
		case m.Value[0] < c.min || m.Value[0] > c.max:
			t.Errorf("%s: %v, want %v to %v", c.name, m.Value[0], c.min, c.max)
		case c.against != (len(m.Against) == 1):
			t.Errorf("%s: against %v, want a value: %v", c.name, m.Against, c.against)
		}
	}
	if t.Failed() {
		t.Logf("%s", res.stdout)
	}
}
