//go:build admitq_floor || admitq_free

package bench

import (
	"strings"
	"testing"

	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// TestStandIn runs the gate and Enqueue on a build that carries a floor in
// admit.lua's place (make test runs it under each tag, admitq_floor and
// admitq_free): the floor must answer in admit.lua's shape, so that every
// call gets a decision and none an error, and the report must say that
// this build measures a floor, not a limiter.
func TestStandIn(t *testing.T) {
	if lua.AdmitStandIn() == "" {
		t.Fatal("built with a stand-in tag, but lua.AdmitStandIn is empty")
	}
	srv := redistest.Start(t)
	cfg := shortConfig(srv.Options())
	cfg.Only = []string{"gate-batched", "enqueue"}
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.AdmitStandIn != lua.AdmitStandIn() {
		t.Errorf("report names %q as the stand-in, want %q", rep.AdmitStandIn, lua.AdmitStandIn())
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "admit.lua replaced by "+lua.AdmitStandIn()) {
		t.Errorf("the report's text does not say admit.lua was replaced:\n%s", text.String())
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rep.Rows))
	}
	free := strings.Contains(lua.AdmitStandIn(), "free.lua")
	for _, row := range rep.Rows {
		if row.Decisions == 0 || row.Errors != 0 {
			t.Errorf("%s: %d decisions, %d errors (first: %s)", row.ID, row.Decisions, row.Errors, row.FirstError)
		}
		switch {
		case free && (row.Admitted != row.Decisions || row.LogKeysSampled != 0):
			t.Errorf("%s: %d of %d decisions admitted and %d logs kept; free.lua admits all and keeps none", row.ID, row.Admitted, row.Decisions, row.LogKeysSampled)
		case !free && (row.Admitted == 0 || row.Admitted+row.Rejected != row.Decisions || row.BytesPerEntry < 10):
			t.Errorf("%s: %d admitted and %d rejected of %d, %.1f bytes per log entry; ttlfloor.lua admits (and may reject) and keeps a log",
				row.ID, row.Admitted, row.Rejected, row.Decisions, row.BytesPerEntry)
		}
	}
}
