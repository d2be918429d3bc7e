package lua_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// asynqLook returns the script of asynq's look into a queue (RDB.Dequeue),
// read from the source of the asynq module this build uses: take.lua must
// do to each task it takes what that script does to one, and an asynq
// whose look changed fails here.
func asynqLook(t *testing.T) *redis.Script {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/hibiken/asynq").Output()
	if err != nil {
		t.Fatalf("finding asynq's source: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "internal", "rdb", "rdb.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)var dequeueCmd = redis.NewScript\\(`(.*?)`\\)").FindSubmatch(src)
	if m == nil {
		t.Fatal("asynq's internal/rdb/rdb.go has no dequeueCmd: take.lua follows a look asynq no longer has")
	}
	return redis.NewScript(string(m[1]))
}

// queueState is what a look and a giving back touch of queue q: its
// pending and active lists, its leases and its tasks' hashes, with the
// queue's name and the enqueue times written as placeholders.
func queueState(t *testing.T, rdb *redis.Client, q string, ids []string) string {
	t.Helper()
	ctx := context.Background()
	p := "asynq:{" + q + "}:"
	pending, err1 := rdb.LRange(ctx, p+"pending", 0, -1).Result()
	active, err2 := rdb.LRange(ctx, p+"active", 0, -1).Result()
	lease, err3 := rdb.ZRangeWithScores(ctx, p+"lease", 0, -1).Result()
	if err := firstErr(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pending %v\nactive %v\nlease %v\n", pending, active, lease)
	for _, id := range ids {
		h, err := rdb.HGetAll(ctx, p+"t:"+id).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range h {
				if !yield(k) {
					return
				}
			}
		}) {
			v := h[k]
			switch k {
			case "msg":
				v = "(message)"
			case "pending_since":
				v = "(time)"
			}
			fmt.Fprintf(&b, "%s %s=%s\n", id, k, v)
		}
	}
	return b.String()
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// take.lua taking n tasks leaves a queue as n of asynq's own looks do, and
// answers with each task's ID and message; giving back all but the first
// leaves it as asynq's one look does; a paused queue gives nothing.
func TestTakeIsAsynqsLookForSeveral(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	client := asynq.NewClientFromRedisClient(rdb)
	ids := []string{"t1", "t2", "t3", "t4", "t5"}
	for _, q := range []string{"look", "take", "back", "one1"} {
		for _, id := range ids {
			if _, err := client.Enqueue(asynq.NewTask("kind", []byte(id)), asynq.Queue(q), asynq.TaskID(id)); err != nil {
				t.Fatal(err)
			}
		}
	}
	keys := func(q string) []string {
		p := "asynq:{" + q + "}:"
		return []string{p + "pending", p + "paused", p + "active", p + "lease"}
	}
	const lease = 1893456000
	look := asynqLook(t)
	var owns []string
	for range 3 {
		msg, err := look.Run(ctx, rdb, keys("look"), lease, "asynq:{look}:t:").Text()
		if err != nil {
			t.Fatal(err)
		}
		owns = append(owns, msg)
	}
	if _, err := look.Run(ctx, rdb, keys("one1"), lease, "asynq:{one1}:t:").Text(); err != nil {
		t.Fatal(err)
	}

	res, err := lua.Take().Run(ctx, rdb, keys("take"), lease, "asynq:{take}:t:", 3).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 6 {
		t.Fatalf("take.lua answered %d values, want 3 IDs and messages", len(res))
	}
	for i := 0; i < len(res); i += 2 {
		msg, err := rdb.HGet(ctx, "asynq:{take}:t:"+res[i], "msg").Result()
		if err != nil || msg != res[i+1] {
			t.Errorf("take.lua's answer %d: task %q with a message that is not its own (%v)", i/2, res[i], err)
		}
		// asynq's messages name their queue; with it renamed, they match.
		if got, want := strings.ReplaceAll(res[i+1], "take", "look"), owns[i/2]; got != want {
			t.Errorf("take.lua's message %d differs from asynq's look's", i/2)
		}
	}
	if got, want := queueState(t, rdb, "take", ids), queueState(t, rdb, "look", ids); got != want {
		t.Errorf("after take.lua of 3:\n%s\nafter 3 of asynq's looks:\n%s", got, want)
	}

	if _, err := lua.Take().Run(ctx, rdb, keys("back"), lease, "asynq:{back}:t:", 3).StringSlice(); err != nil {
		t.Fatal(err)
	}
	n, err := lua.GiveBack().Run(ctx, rdb, []string{"asynq:{back}:pending", "asynq:{back}:active", "asynq:{back}:lease"},
		"asynq:{back}:t:", "1700000000000000000", "t3", "t2", "t9").Int()
	if err != nil || n != 2 {
		t.Fatalf("give_back.lua of t3, t2 and a task it never took: %d, %v; want 2 given back", n, err)
	}
	if got, want := queueState(t, rdb, "back", ids), queueState(t, rdb, "one1", ids); got != want {
		t.Errorf("after take.lua of 3 and 2 given back:\n%s\nafter one of asynq's looks:\n%s", got, want)
	}

	if err := rdb.Set(ctx, "asynq:{back}:paused", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := queueState(t, rdb, "back", ids)
	if res, err := lua.Take().Run(ctx, rdb, keys("back"), lease, "asynq:{back}:t:", 3).StringSlice(); err != nil || len(res) != 0 {
		t.Errorf("take.lua on a paused queue: %v, %v; want nothing", res, err)
	}
	if after := queueState(t, rdb, "back", ids); after != before {
		t.Errorf("take.lua on a paused queue wrote:\n%s\nwas:\n%s", after, before)
	}
}
