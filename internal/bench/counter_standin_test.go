//go:build admitq_counterfloor

package bench

import (
	"strings"
	"testing"

	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// TestCounterStandIn runs Counter mode on a build that carries
// floor/counterfloor.lua in counter.lua's place: the floor must answer in
// counter.lua's shape, single and batched, so that every call gets a
// decision, and the report must say it measured a floor.
func TestCounterStandIn(t *testing.T) {
	if lua.CounterStandIn() == "" {
		t.Fatal("built with admitq_counterfloor, but lua.CounterStandIn is empty")
	}
	srv := redistest.Start(t)
	cfg := shortConfig(srv.Options())
	cfg.Only = []string{"gate-counter"}
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.CounterStandIn != lua.CounterStandIn() {
		t.Errorf("report names %q as the stand-in, want %q", rep.CounterStandIn, lua.CounterStandIn())
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "counter.lua replaced by "+lua.CounterStandIn()) {
		t.Errorf("the report's text does not say counter.lua was replaced:\n%s", text.String())
	}
	for _, row := range append(rep.Rows, rep.AtQuota.Rows...) {
		if row.Decisions == 0 || row.Errors != 0 || row.Admitted != row.Decisions {
			t.Errorf("%s: %d of %d admitted, %d errors (first: %s); the floor admits all", row.ID, row.Admitted, row.Decisions, row.Errors, row.FirstError)
		}
	}
}
