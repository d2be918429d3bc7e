package admission

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
)

// batchCheck holds counter.lua called for several keys at once (a batch,
// as the committer sends Counter-mode tenants on one Redis) to the same
// calls made one by one: two miniredis on one clock, one for each, whose
// replies and keys must match.
type batchCheck struct {
	t                 *testing.T
	script            *redis.Script
	batchMR, singleMR *miniredis.Miniredis
	batch, single     *redis.Client

	keys   []string
	quotas []counterQuota // the batch's, each once
	calls  []any          // each key's quota index, not-before time and count
	want   []int64
}

// counterQuota is a quota and granularity as counter.lua takes them.
type counterQuota struct {
	q    Quota
	gran int64
}

// counterArgs returns counter.lua's ARGV for one key: n requests under q
// and gran that start at nb (µs, 0 for now).
func counterArgs(q Quota, gran int64, n int, nb int64) []any {
	return []any{1, q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), gran, 1, nb, n}
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
	c.keys, c.quotas, c.calls, c.want = nil, nil, nil, nil
}

// add makes one call alone, for key, and adds it to the batch.
func (c *batchCheck) add(key string, q Quota, gran int64, n int, nb int64) {
	c.t.Helper()
	res, err := c.script.Run(c.t.Context(), c.single, []string{key}, counterArgs(q, gran, n, nb)...).Int64Slice()
	if err != nil {
		c.t.Fatal(err)
	}
	if c.want == nil {
		c.want = res[:1] // now
	}
	c.want = append(c.want, res[1:]...)
	i := slices.Index(c.quotas, counterQuota{q, gran})
	if i < 0 {
		i = len(c.quotas)
		c.quotas = append(c.quotas, counterQuota{q, gran})
	}
	c.keys, c.calls = append(c.keys, key), append(c.calls, i+1, nb, n)
}

// check runs the batch and fails the test unless its reply is the calls'
// replies, and each of keys holds the same and expires at the same time
// on both servers.
func (c *batchCheck) check(desc string, keys []string) {
	c.t.Helper()
	ctx := c.t.Context()
	args := []any{len(c.quotas)}
	for _, cq := range c.quotas {
		args = append(args, cq.q.Limit, cq.q.Window.Microseconds(), cq.q.MaxDelay.Microseconds(), cq.gran)
	}
	got, err := c.script.Run(ctx, c.batch, c.keys, append(args, c.calls...)...).Int64Slice()
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

// dump returns what key holds: a sorted set's members and scores, a
// hash's fields, a list's elements or a string.
func dump(t *testing.T, rdb *redis.Client, key string) any {
	ctx := t.Context()
	switch rdb.Type(ctx, key).Val() {
	case "zset":
		return rdb.ZRangeWithScores(ctx, key, 0, -1).Val()
	case "hash":
		return rdb.HGetAll(ctx, key).Val()
	case "list":
		return rdb.LRange(ctx, key, 0, -1).Val()
	case "string":
		return rdb.Get(ctx, key).Val()
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
