package lua_test

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/lua"
)

func TestStartedMarksOnceAndNeverCreatesATask(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	script := lua.Started()
	key := "asynq:{default}:t:id-1"
	run := func() int64 {
		t.Helper()
		n, err := script.Run(ctx, rdb, []string{key}, "admitq_started").Int64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	if got := run(); got != -1 {
		t.Errorf("no task: got %d, want -1", got)
	}
	if mr.Exists(key) {
		t.Fatal("the script created the task hash of a task that does not exist")
	}
	mr.HSet(key, "msg", "…")
	for i, want := range []int64{1, 0, 0} {
		if got := run(); got != want {
			t.Errorf("call %d on an existing task: got %d, want %d", i+1, got, want)
		}
	}
	if v := mr.HGet(key, "msg"); v != "…" {
		t.Errorf("the task's own field msg = %q, want it untouched", v)
	}
}
