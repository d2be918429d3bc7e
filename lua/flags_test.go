package lua_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// admitArgs are admit.lua's ARGV for one key, one quota (limit per window
// µs, no delay, no granularity) and ids.
func admitArgs(limit, windowUs int, ids ...string) []any {
	args := []any{1, limit, windowUs, 0, 1, 1, 0, len(ids)}
	for _, id := range ids {
		args = append(args, id)
	}
	return args
}

// TestAdmitStartsWithItsFlags checks that admit.lua's first line is its
// shebang: Redis reads flags only there.
func TestAdmitStartsWithItsFlags(t *testing.T) {
	if lua.AdmitStandIn() != "" {
		t.Skip("a stand-in build")
	}
	first, _, _ := strings.Cut(admitSource(t), "\n")
	if want := "#!lua flags=allow-cross-slot-keys"; first != want {
		t.Errorf("admit.lua starts with %q, want the shebang %q (its flags, and no allow-oom)", first, want)
	}
}

// admitSource returns admit.lua, which Admit runs byte for byte
// (TestAdmitCarriesItsFile).
func admitSource(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("admit.lua")
	if err != nil {
		t.Fatal(err)
	}
	return string(src)
}

// TestAdmitIsRefusedWholeOutOfMemory runs admit.lua on a real redis-server
// over its maxmemory (noeviction), on a log whose entries have left the
// window, so that the script trims (a deletion) before it records: the flagged script
// is refused before it runs, and the log keeps every entry; the same body
// without its shebang trims, and then its ZADD lands past maxmemory.
func TestAdmitIsRefusedWholeOutOfMemory(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const key = "{t}:log"
	flagged := lua.Admit()
	_, body, _ := strings.Cut(admitSource(t), "\n")
	legacy := redis.NewScript(body)

	for _, tc := range []struct {
		desc    string
		script  *redis.Script
		wantOOM bool
		wantLog string
	}{
		{"flagged: refused whole, nothing trimmed or recorded", flagged, true, "a b"},
		{"without flags: trimmed, then recorded past maxmemory", legacy, false, "b c"},
	} {
		if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		rdb.Del(ctx, key)
		// a leaves the 200 ms window before c comes, b does not: c's call
		// trims a, then records c.
		for _, id := range []string{"a", "b"} {
			if err := flagged.Run(ctx, rdb, []string{key}, admitArgs(3, 200_000, id)...).Err(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(120 * time.Millisecond)
		}
		if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		if ok, _ := rdb.ScriptExists(ctx, flagged.Hash()).Result(); len(ok) != 1 || !ok[0] {
			t.Fatal("Redis does not know admit.lua by the hash go-redis sends (EVALSHA)")
		}
		err := tc.script.Run(ctx, rdb, []string{key}, admitArgs(3, 200_000, "c")...).Err()
		if gotOOM := err != nil && strings.HasPrefix(err.Error(), "OOM "); gotOOM != tc.wantOOM {
			t.Errorf("%s: err = %v, want OOM %v", tc.desc, err, tc.wantOOM)
		}
		if got := strings.Join(rdb.ZRange(ctx, key, 0, -1).Val(), " "); got != tc.wantLog {
			t.Errorf("%s: the log holds %q, want %q", tc.desc, got, tc.wantLog)
		}
	}
	rdb.ConfigSet(ctx, "maxmemory", "0")
}

// TestFlagFallbackOnAServerWithoutFlags runs admit.lua on miniredis, which
// does not know script flags, through FlagFallback: alone (EVALSHA, then
// EVAL) and in pipelines, where a later EVALSHA finds the script loaded
// without its shebang.
func TestFlagFallbackOnAServerWithoutFlags(t *testing.T) {
	mr := miniredis.RunT(t)
	ctx := context.Background()
	plain := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer plain.Close()
	if err := lua.Admit().Run(ctx, plain, []string{"{x}:log"}, admitArgs(5, 1e6, "a")...).Err(); err == nil {
		t.Fatal("miniredis ran a script with a shebang: this test no longer tests the fallback")
	}

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	rdb.AddHook(lua.FlagFallback())
	script := lua.Admit()
	for i, id := range []string{"a", "b"} {
		res, err := script.Run(ctx, rdb, []string{"{t}:log"}, admitArgs(5, 1e6, id)...).Int64Slice()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if res[1] != 0 {
			t.Errorf("call %d: outcome %d, want 0 (admitted)", i, res[1])
		}
	}
	pipe := rdb.Pipeline()
	sha := pipe.EvalSha(ctx, script.Hash(), []string{"{t}:log"}, admitArgs(5, 1e6, "c")...)
	eval := pipe.Eval(ctx, "#!lua\nreturn 7", nil)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := eval.Int64(); got != 7 {
		t.Errorf("EVAL of a new flagged script in a pipeline = %d, want 7", got)
	}
	if res, _ := sha.Int64Slice(); len(res) < 2 || res[1] != 0 {
		t.Errorf("EVALSHA in a pipeline after the fallback: %v, want c admitted", res)
	}
	if n := mr.Exists("{t}:log"); !n {
		t.Fatal("no log")
	}
	if members, _ := mr.ZMembers("{t}:log"); len(members) != 3 {
		t.Errorf("the log holds %v, want a, b and c", members)
	}
}
