package lua

import (
	"regexp"
	"strings"
	"testing"
)

// The prelude's top-level locals are each declared once: begin assigns
// the per-call ones by name, and a second local of the same name would
// take the assignment from the functions that read the first (a library's
// functions are defined once, not per call).
func TestFairPreludeDeclaresEachNameOnce(t *testing.T) {
	decl := regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_][A-Za-z_0-9]*(?:, *[A-Za-z_][A-Za-z_0-9]*)*)`)
	seen := map[string]bool{}
	for _, m := range decl.FindAllStringSubmatch(FairPrelude(), -1) {
		for _, name := range strings.Split(m[1], ",") {
			name = strings.TrimSpace(name)
			if seen[name] {
				t.Errorf("fair.lua declares %q twice at its top level", name)
			}
			seen[name] = true
		}
	}
	if !seen["begin"] || !seen["now"] {
		t.Fatalf("fair.lua declares no begin or now: the pattern is wrong")
	}
}

// The library registers each script's function, under its version.
func TestFairLibraryRegistersEachScript(t *testing.T) {
	lib := FairLibrary()
	if !strings.HasPrefix(lib, "#!lua name=admitq_fair_"+version+"\n") {
		t.Errorf("library starts %q", lib[:40])
	}
	for _, s := range []FairScript{FairPark(), FairDispatch(), FairMove(), FairRepair(), FairAdopt()} {
		if !strings.Contains(lib, "redis.register_function('"+s.Function+"',") {
			t.Errorf("the library registers no %s", s.Function)
		}
	}
}
