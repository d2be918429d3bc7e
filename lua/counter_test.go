package lua_test

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// TestCounterScriptsCarryTheirFiles checks that each counter-mode script
// is its file's shebang line, then counter_prelude.lua, then the rest of
// its file, byte for byte; and that the ones that write declare a shebang
// without allow-oom, so that Redis refuses them whole over maxmemory
// rather than stopping them at a write.
func TestCounterScriptsCarryTheirFiles(t *testing.T) {
	prelude, err := os.ReadFile("counter_prelude.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file   string
		script *redis.Script
		writes bool
	}{
		{"counter.lua", lua.Counter(), true},
		{"counter_release.lua", lua.CounterRelease(), true},
		{"counter_usage.lua", lua.CounterUsage(), false},
	} {
		if c.file == "counter.lua" && lua.CounterStandIn() != "" {
			continue // a benchmark build's floor
		}
		src, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		shebang, body, _ := strings.Cut(string(src), "\n")
		sum := sha1.Sum([]byte(shebang + "\n" + string(prelude) + body))
		if got, want := c.script.Hash(), hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s: the script has SHA1 %s; its file and the prelude make %s", c.file, got, want)
		}
		switch {
		case !strings.HasPrefix(shebang, "#!lua"):
			t.Errorf("%s starts with %q, want a #!lua shebang", c.file, shebang)
		case strings.Contains(shebang, "allow-oom"):
			t.Errorf("%s: %q allows writes over maxmemory", c.file, shebang)
		case !c.writes && !strings.Contains(shebang, "no-writes"):
			t.Errorf("%s writes nothing but does not say so: %q", c.file, shebang)
		case c.writes && strings.Contains(shebang, "no-writes"):
			t.Errorf("%s writes but declares no-writes: %q", c.file, shebang)
		}
	}
}

// TestCounterTakesItsWindowsFromARGV checks that counter.lua (or, in a
// build with the tag admitq_counterfloor, its floor) decides alike whether
// its windows are declared in KEYS or, as a cluster's calls across slots
// have them, named in ARGV after "windows", with only the first declared.
func TestCounterTakesItsWindowsFromARGV(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	// One quota (2 a minute); three requests for the first window, one for
	// the second.
	tail := []any{1, 2, 60_000_000, 0, 1, 1, 0, 3, 1, 0, 1}
	sameDecisions(t, rdb, lua.Counter(), []string{"{x}:cnt", "{y}:cnt"},
		[]string{"{p}:cnt"}, append([]any{"windows", 2, "{p}:cnt", "{q}:cnt"}, tail...), tail)
	if n := rdb.Exists(t.Context(), "{p}:cnt", "{q}:cnt").Val(); n != 2 {
		t.Errorf("%d of the two windows named in ARGV exist, want 2", n)
	}
}
