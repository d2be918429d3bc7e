package admission

import (
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
)

// batchCheck holds a script called as a batch (ARGV "batch", then each
// call's ARGV) to the same calls made one by one: two miniredis on one
// clock, one for each, whose replies and keys must match.
type batchCheck struct {
	t                 *testing.T
	script            *redis.Script
	batchMR, singleMR *miniredis.Miniredis
	batch, single     *redis.Client

	keys []string
	args []any
	want []int64
}

// newBatchCheck returns a batchCheck for script; with clockTTL, keys
// expire as the clock is set, as in Redis.
func newBatchCheck(t *testing.T, script *redis.Script, clockTTL bool) *batchCheck {
	c := &batchCheck{t: t, script: script}
	c.batchMR, c.batch = onMini(t)
	c.singleMR, c.single = onMini(t)
	c.batchMR.ClockTTL(clockTTL)
	c.singleMR.ClockTTL(clockTTL)
	return c
}

// flush empties both servers.
func (c *batchCheck) flush() {
	c.batchMR.FlushAll()
	c.singleMR.FlushAll()
}

// at sets both clocks to now and starts a batch.
func (c *batchCheck) at(now time.Time) {
	c.batchMR.SetTime(now)
	c.singleMR.SetTime(now)
	c.keys, c.args, c.want = nil, []any{"batch"}, nil
}

// add makes one call alone and adds it to the batch.
func (c *batchCheck) add(keys []string, args []any) {
	c.t.Helper()
	res, err := c.script.Run(c.t.Context(), c.single, keys, args...).Int64Slice()
	if err != nil {
		c.t.Fatal(err)
	}
	if c.want == nil {
		c.want = res[:1] // now
	}
	c.want = append(c.want, res[1:]...)
	c.keys, c.args = append(c.keys, keys...), append(c.args, args...)
}

// check runs the batch and fails the test unless its reply is the calls'
// replies, and each of keys holds the same and expires at the same time
// on both servers.
func (c *batchCheck) check(desc string, keys []string) {
	c.t.Helper()
	ctx := c.t.Context()
	got, err := c.script.Run(ctx, c.batch, c.keys, c.args...).Int64Slice()
	if err != nil {
		c.t.Fatal(err)
	}
	desc = fmt.Sprintf("%s keys %v", desc, c.keys)
	if diff := cmp.Diff(c.want, got); diff != "" {
		c.t.Fatalf("%s: batch reply (-singles,+batch):\n%s", desc, diff)
	}
	for _, key := range keys {
		if diff := cmp.Diff(dump(c.t, c.single, key), dump(c.t, c.batch, key)); diff != "" {
			c.t.Fatalf("%s: %s (-singles,+batch):\n%s", desc, key, diff)
		}
		if s, b := c.single.PExpireTime(ctx, key).Val(), c.batch.PExpireTime(ctx, key).Val(); s != b {
			c.t.Fatalf("%s: %s expires at %v after singles, %v after the batch", desc, key, s, b)
		}
	}
}

// dump returns what key holds: a sorted set's members and scores, or a
// hash's fields.
func dump(t *testing.T, rdb *redis.Client, key string) any {
	ctx := t.Context()
	switch rdb.Type(ctx, key).Val() {
	case "zset":
		return rdb.ZRangeWithScores(ctx, key, 0, -1).Val()
	case "hash":
		return rdb.HGetAll(ctx, key).Val()
	}
	return nil
}

// onBothServers runs test as a subtest on miniredis and on a real
// redis-server, each fresh.
func onBothServers(t *testing.T, test func(t *testing.T, rdb *redis.Client)) {
	t.Run("miniredis", func(t *testing.T) {
		_, rdb := onMini(t)
		test(t, rdb)
	})
	t.Run("redis-server", func(t *testing.T) { test(t, redistest.Start(t).Client(t)) })
}
