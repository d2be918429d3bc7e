package admission

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/lua"
)

// TestCounterBatchMatchesSingles: counter.lua called with several keys (a
// batch, as the committer sends Counter-mode tenants on one Redis) decides
// each as a call of its own would, one after another at the same Redis
// time, and leaves the same windows, lists and expiries. The batches repeat
// tenants, mix quotas, granularities and not-before times, and span
// deferrals and rejections.
func TestCounterBatchMatchesSingles(t *testing.T) {
	c := newBatchCheck(t, lua.Counter(), false)
	tenants := []string{"{a}:cnt", "{b}:cnt", "{c}:cnt"}
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 23))
		c.flush()
		var quotas []Quota
		for range 2 {
			quotas = append(quotas, Quota{
				Limit:    3 + r.IntN(20),
				Window:   time.Duration(100+r.IntN(900)) * time.Millisecond,
				MaxDelay: time.Duration(r.IntN(600)) * time.Millisecond,
				Mode:     Counter,
			})
		}
		now := time.Unix(1_780_000_000, 0).Add(time.Duration(r.IntN(1e6)) * time.Microsecond)
		for step := range 30 {
			now = now.Add(time.Duration(r.Int64N(int64(150 * time.Millisecond))))
			c.at(now)
			for range 1 + r.IntN(4) {
				key, q := tenants[r.IntN(len(tenants))], quotas[r.IntN(len(quotas))]
				gran := []int64{1, 1, 1000}[r.IntN(3)]
				var nb int64
				if r.IntN(4) == 0 {
					nb = now.UnixMicro() + r.Int64N(q.Window.Microseconds())
				}
				c.add(key, q, gran, 1+r.IntN(3), nb)
			}
			c.check(fmt.Sprintf("seed %d step %d", seed, step), append(tenants, "{a}:cnt:o", "{b}:cnt:o", "{c}:cnt:o"))
		}
	}
}

// TestCounterBatchWrongTypeWritesNothing: a batch with a key of the wrong
// type fails whole, before any key is written: the committer then decides
// each tenant alone, and a half-written batch would record some twice.
func TestCounterBatchWrongTypeWritesNothing(t *testing.T) {
	onBothServers(t, testCounterBatchWrongType)
}

func testCounterBatchWrongType(t *testing.T, rdb *redis.Client) {
	ctx := t.Context()
	if err := rdb.HSet(ctx, "{b}:cnt", "f", "x").Err(); err != nil {
		t.Fatal(err)
	}
	q := Quota{Limit: 10, Window: time.Second, Mode: Counter}
	args := append(counterArgs(q, 1, 1, 0), 1, 0, 1)
	err := lua.Counter().Run(ctx, rdb, []string{"{a}:cnt", "{b}:cnt"}, args...).Err()
	if err == nil || !strings.Contains(err.Error(), "{b}:cnt holds a hash") {
		t.Fatalf("a batch with a hash key: %v, want an error naming the key and its type", err)
	}
	if n := rdb.Exists(ctx, "{a}:cnt").Val(); n != 0 {
		t.Fatalf("the batch failed with %v but wrote {a}:cnt", err)
	}
}
