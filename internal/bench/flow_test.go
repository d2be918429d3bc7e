package bench

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/admitq/admitq/internal/worktime"
)

func TestLabelledPayload(t *testing.T) {
	for _, c := range []struct {
		desc  string
		seq   int
		class string
		keys  []string
	}{
		{"no keys", 7, "keyless", nil},
		{"one key", 0, "keyed", []string{"api:shared"}},
		{"three keys", 1 << 40, "cpu", []string{"a", "b:c", "d"}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			r := readPayload(labelled(c.seq, c.class, c.keys...))
			if r.seq != c.seq || r.class != c.class || !slices.Equal(r.keys, c.keys) || time.Since(r.queued) > time.Minute {
				t.Errorf("read back seq %d class %q keys %q queued %v, want %d %q %q now", r.seq, r.class, r.keys, r.queued, c.seq, c.class, c.keys)
			}
		})
	}
	if r := readPayload(stamp()); r.seq != -1 || r.queued.IsZero() {
		t.Errorf("a stamp reads as seq %d, queued %v: want -1 and its time", r.seq, r.queued)
	}
}

func TestStartOrder(t *testing.T) {
	at := time.Unix(1000, 0)
	runsIn := func(base int, seqs ...int) []run {
		rs := make([]run, len(seqs))
		for i, s := range seqs {
			rs[i] = run{Run: worktime.Run{Start: at.Add(time.Duration(i) * time.Millisecond)}, seq: base + s}
		}
		// Stored in another order than started: startOrder sorts by start.
		slices.Reverse(rs)
		return rs
	}
	for _, c := range []struct {
		desc                string
		runs                []run
		base                int
		inversions, displac int
	}{
		{"in order", runsIn(0, 0, 1, 2, 3), 0, 0, 0},
		{"in order from a base", runsIn(100, 0, 1, 2), 100, 0, 0},
		{"two swapped", runsIn(0, 1, 0, 2, 3), 0, 1, 1},
		{"last first", runsIn(0, 3, 0, 1, 2), 0, 3, 3},
		{"reversed", runsIn(0, 4, 3, 2, 1, 0), 0, 10, 4},
		{"none", nil, 0, 0, 0},
	} {
		t.Run(c.desc, func(t *testing.T) {
			inv, d := startOrder(c.runs, c.base)
			if inv != c.inversions || d != c.displac {
				t.Errorf("startOrder = %d inversions, %d places; want %d, %d", inv, d, c.inversions, c.displac)
			}
		})
	}
}

// TestFlowReportText: medians, a ratio's spread where there is something
// to compare with, the value's where there is not (or it is 0), and the
// checks, held or broken.
func TestFlowReportText(t *testing.T) {
	rep := FlowReport{Config: FlowConfig{Runs: 3}.withDefaults(), Checks: []string{"a", "b"}}
	for _, r := range []struct{ peak, cpu, none, inv float64 }{{20, 30, 10, 0}, {19, 40, 10, 2}, {20, 33, 11, 1}} {
		rep.add("key capped at 20: most of its tasks running at once", "tasks", "≤ 20", r.peak)
		rep.add("Redis CPU per task, 1 key on each", "µs", "", r.cpu, r.none)
		rep.add("paused: pairs of its tasks started out of enqueue order", "pairs", "", r.inv, 0)
		rep.add("pool busy while both kinds wait", "of pool", "", r.peak/20)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(text.String(), "\n")
	for _, want := range [][]string{
		{"MEASURE", "VALUE", "AGAINST", "RATIO", "SPREAD", "TARGET"},
		{"key capped at 20: most of its tasks running at once", "20", "-", "-", "19.00–20.00", "≤ 20"},
		{"Redis CPU per task, 1 key on each", "33.0 µs", "10.0 µs", "3.00×", "3.00–4.00", "-"},
		{"paused: pairs of its tasks started out of enqueue order", "1", "0", "-", "0.00–2.00", "-"},
		{"pool busy while both kinds wait", "100%", "-", "-", "95–100%", "-"},
		{"held in every run: a; b"},
	} {
		i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, want[0]) })
		if i < 0 {
			t.Fatalf("no line for %q in:\n%s", want[0], text.String())
		}
		if diff := cmp.Diff(strings.Fields(strings.Join(want, " ")), strings.Fields(lines[i])); diff != "" {
			t.Errorf("line %q (-want,+got):\n%s", want[0], diff)
		}
	}

	rep.Violations = []string{"run 2/3: x broke"}
	text.Reset()
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if s := text.String(); !strings.Contains(s, "checked: a; b\nVIOLATED: run 2/3: x broke\n") || strings.Contains(s, "held in every run") {
		t.Errorf("a report with a violation ends:\n%s", s[strings.LastIndex(s, "\n\n"):])
	}
}

func TestFlowScale(t *testing.T) {
	got := FlowConfig{KeyCap: 5}.Scale(0.01)
	got.Progress = nil
	want := FlowConfig{Tenants: 10, PerTenant: 4, KeyCap: 5, Task: 10 * time.Millisecond, CPUTasks: 30, Paused: 100, Ordered: 2, Concurrency: 64, Producers: 16, Runs: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Scale(0.01) (-want,+got):\n%s", diff)
	}
}
