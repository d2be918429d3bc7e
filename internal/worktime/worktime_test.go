package worktime

import (
	"testing"
	"time"
)

func TestWorkTime(t *testing.T) {
	t0 := time.Unix(1_780_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	runs := []Run{
		{"a", at(0), at(30)},
		{"b", at(0), at(10)},
		{"a", at(30), at(60)},
		{"b", at(10), at(20)},
		{"a", at(60), at(90)}, // b has no task left to start after 10
	}
	if first, last := Span(runs); !first.Equal(at(0)) || !last.Equal(at(90)) {
		t.Errorf("Span = %v, %v; want 0ms, 90ms", first.Sub(t0), last.Sub(t0))
	}
	from, to := Contended(runs, "a", "b")
	if !from.Equal(at(0)) || !to.Equal(at(10)) {
		t.Errorf("Contended = %v, %v; want 0ms, 10ms (b's last start)", from.Sub(t0), to.Sub(t0))
	}
	used := Used(runs, at(5), at(40))
	if used["a"] != 35*time.Millisecond || used["b"] != 15*time.Millisecond {
		t.Errorf("Used in [5ms, 40ms) = %v; want a 35ms, b 15ms", used)
	}
	if r := Ratio(runs, "a", "b"); r != 1 {
		t.Errorf("Ratio = %v; want 1: both ran 10ms while both had tasks to start", r)
	}
	if r := Ratio(runs, "a", "c"); r != 0 {
		t.Errorf("Ratio against a tenant with no runs = %v; want 0", r)
	}
}
