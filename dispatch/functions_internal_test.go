package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// The scripts run as functions of the dispatcher's library, which a
// dispatcher loads again when Redis has lost it (a restart from an older
// snapshot, FUNCTION FLUSH).
func TestTheLibraryIsLoadedAgainWhenRedisLosesIt(t *testing.T) {
	ctx := context.Background()
	d, rdb, _ := rig(t, admission.Quota{Limit: 100_000, Window: time.Second})
	d.turnRaw(ctx, t, 0, 0, 0, 0)
	if err := rdb.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	d.turnRaw(ctx, t, 0, 0, 0, 0)
	if d.scripts.evalOnly.Load() {
		t.Fatal("the dispatcher gave up on functions")
	}
	libs, err := rdb.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	if err != nil || len(libs) != 1 {
		t.Fatalf("libraries %v, %v", libs, err)
	}
}

// A user that may not load functions gets the scripts with EVALSHA.
func TestAUserWithoutFunctionsRunsTheScripts(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "nofn", "on", ">pw", "~*", "&*", "+@all", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	opts := srv.Options()
	opts.Username, opts.Password = "nofn", "pw"
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	quotas := admission.NewRedisQuotas(rdb)
	q := admission.Quota{Limit: 100_000, Window: time.Second}
	if err := quotas.SetDefault(ctx, q); err != nil {
		t.Fatal(err)
	}
	g := admission.New(rdb, quotas)
	t.Cleanup(func() { g.Close() })
	d := New(rdb, g, nil)
	d.turnRaw(ctx, t, 0, 0, 0, 0)
	tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: "a"}, q)
	if err != nil || tk.Verdict != Straight {
		t.Fatalf("park: %v %v", tk.Verdict, err)
	}
	if !d.scripts.evalOnly.Load() {
		t.Error("the scripts ran as functions the user may not load")
	}
}
