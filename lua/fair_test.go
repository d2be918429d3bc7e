package lua

import (
	"os"
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

// The dispatcher's scripts carry fair.lua as it is, or, in a benchmark
// build (FrontStandIn), fair.lua with floor/frontall.lua in the place of
// its function fronts and nothing else changed.
func TestFairCarriesItsFronts(t *testing.T) {
	src, err := os.ReadFile("fair.lua")
	if err != nil {
		t.Fatal(err)
	}
	want := string(src)
	if s := FrontStandIn(); s != "" {
		path, _, _ := strings.Cut(s, " ")
		stand, err := os.ReadFile(strings.TrimPrefix(path, "lua/"))
		if err != nil {
			t.Fatal(err)
		}
		own := regexp.MustCompile(`(?s)local function fronts\(.*?\nend\n`)
		if n := len(own.FindAllString(want, -1)); n != 1 {
			t.Fatalf("fair.lua declares fronts %d times", n)
		}
		want = own.ReplaceAllLiteralString(want, string(stand))
	}
	if FairPrelude() != want {
		t.Errorf("the prelude is not fair.lua with its stand-in (%q)", FrontStandIn())
	}
	if !strings.Contains(FairLibrary(), want) {
		t.Errorf("the library does not carry the prelude")
	}
}

// The park and the turn are fair_park.lua and fair_dispatch.lua, or, in a
// benchmark build (DispatchStandIn), floor/leanpark.lua and
// floor/leanturn.lua, in the library and as scripts alike.
func TestFairCarriesItsParkAndTurn(t *testing.T) {
	park, turn := "fair_park.lua", "fair_dispatch.lua"
	if s := DispatchStandIn(); s != "" {
		park, turn = "floor/leanpark.lua", "floor/leanturn.lua"
		if !strings.HasPrefix(s, "lua/"+park+" and lua/"+turn+" ") {
			t.Errorf("DispatchStandIn names %q, want %s and %s", s, park, turn)
		}
	}
	for _, c := range []struct {
		name, file string
		s          FairScript
	}{{"park", park, FairPark()}, {"dispatch", turn, FairDispatch()}} {
		src, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(FairLibrary(), "\nlocal function "+c.name+"()\n"+string(src)+"\nend\n") {
			t.Errorf("the library's %s does not carry %s", c.name, c.file)
		}
		if want := fair(c.name, string(src)); c.s.Plain.Hash() != want.Plain.Hash() || c.s.Flagged.Hash() != want.Flagged.Hash() {
			t.Errorf("the script %s does not carry %s", c.s.Function, c.file)
		}
	}
}

// A top-level local of the prelude is seen only below its declaration:
// called above it, inside a function, it is a global, which Redis
// Functions refuse when the line runs (rarely, for a rare branch). No
// function of the prelude calls one declared below it.
func TestFairPreludeNamesNoLocalBeforeItsDeclaration(t *testing.T) {
	src := FairPrelude()
	decl := regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_][A-Za-z_0-9]*(?:, *[A-Za-z_][A-Za-z_0-9]*)*)`)
	lines := strings.Split(src, "\n")
	declared := map[string]int{} // name -> line of its declaration
	for i, line := range lines {
		if m := decl.FindStringSubmatch(line); m != nil {
			for _, name := range strings.Split(m[1], ",") {
				declared[strings.TrimSpace(name)] = i
			}
		}
	}
	if len(declared) < 50 {
		t.Fatalf("found %d top-level locals: the pattern is wrong", len(declared))
	}
	// a call of a name, not of a field (.name( or :name()
	call := regexp.MustCompile(`(?:^|[^.:A-Za-z_0-9])([A-Za-z_][A-Za-z_0-9]*)\(`)
	quoted := regexp.MustCompile(`'[^']*'`)
	calls := 0
	for i, line := range lines {
		code, _, _ := strings.Cut(line, "--")
		for _, m := range call.FindAllStringSubmatch(quoted.ReplaceAllString(code, "''"), -1) {
			at, ok := declared[m[1]]
			if !ok {
				continue
			}
			calls++
			if at > i {
				t.Errorf("fair.lua line %d calls %s, declared at line %d below it: there it is a global", i+1, m[1], at+1)
			}
		}
	}
	if calls < 100 {
		t.Fatalf("found %d calls of the prelude's functions: the pattern is wrong", calls)
	}
}
