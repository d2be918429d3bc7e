package lua_test

import (
	"crypto/sha1"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// TestAdmitCarriesItsFile checks that Admit runs admit.lua, or in a build
// with a stand-in tag the floor AdmitStandIn names (make test runs it
// under each tag), byte for byte: a benchmark that measured the wrong
// script would pass every other check.
func TestAdmitCarriesItsFile(t *testing.T) {
	file := "admit.lua"
	if s := lua.AdmitStandIn(); s != "" {
		path, _, _ := strings.Cut(s, " ")
		file = strings.TrimPrefix(path, "lua/")
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(src)
	if got, want := lua.Admit().Hash(), hex.EncodeToString(sum[:]); got != want {
		t.Errorf("Admit runs the script with SHA1 %s; %s has %s", got, file, want)
	}
}

// TestAdmitTakesItsLogsFromARGV checks that admit.lua (or, in a build with
// a stand-in tag, its floor) decides alike whether its logs are declared
// in KEYS or, as a cluster's calls across slots have them, named in ARGV
// after "logs", with only the first declared: the same outcomes and room
// left, and the same entries in each log.
func TestAdmitTakesItsLogsFromARGV(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	// One quota (2 a minute); three IDs for the first log, one for the second.
	tail := []any{1, 2, 60_000_000, 0, 1, 1, 0, 3, "a", "b", "c", 1, 0, 1, "d"}
	sameDecisions(t, rdb, lua.Admit(), []string{"{x}:log", "{y}:log"},
		[]string{"{p}:log"}, append([]any{"logs", 2, "{p}:log", "{q}:log"}, tail...), tail)
	for _, pair := range [][2]string{{"{x}:log", "{p}:log"}, {"{y}:log", "{q}:log"}} {
		if a, b := rdb.ZRange(t.Context(), pair[0], 0, -1).Val(), rdb.ZRange(t.Context(), pair[1], 0, -1).Val(); !slices.Equal(a, b) {
			t.Errorf("%s holds %v, %s holds %v", pair[0], a, pair[1], b)
		}
	}
}

// sameDecisions runs script with its keys declared (keys, tail) and with
// them named in ARGV (named, argv), on keys of its own, for three requests
// of the first key and one of the second, and checks that both give the
// same outcomes and room left.
func sameDecisions(t *testing.T, rdb *redis.Client, script *redis.Script, keys, named []string, argv, tail []any) {
	t.Helper()
	decide := func(keys []string, argv []any) (codes, left []int64) {
		t.Helper()
		res, err := script.Run(t.Context(), rdb, keys, argv...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		o := 1
		for _, n := range []int{3, 1} {
			if len(res) < o+3*n+1 {
				t.Fatalf("reply %v is short", res)
			}
			for range n {
				codes, left = append(codes, res[o]), append(left, res[o+2])
				o += 3
			}
			o++ // the key's retry hint
		}
		return codes, left
	}
	codes, left := decide(keys, tail)
	namedCodes, namedLeft := decide(named, argv)
	if !slices.Equal(codes, namedCodes) || !slices.Equal(left, namedLeft) {
		t.Errorf("keys in ARGV: outcomes %v, left %v; declared: %v, %v", namedCodes, namedLeft, codes, left)
	}
}
