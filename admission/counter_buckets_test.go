package admission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/lua"
)

// TestCounterBucketsHoldTheirSlots checks counter.lua's hash against the
// slots it handed out, on an exact clock, through random traffic with
// batches, deferrals, rejections, not-before times and releases:
//   - every bucket a window from now on reaches holds exactly the entries
//     recorded in its time, less those released. The script sets a bucket's
//     new count rather than incrementing it, which is right only if no
//     stored bucket lies after the newest slot's and the read saw the rest;
//   - "n" is the sum of the buckets the hash holds;
//   - the hash stays small: a sweep starts once per window, so after a
//     recording call no bucket is older than two windows and a bucket.
func TestCounterBucketsHoldTheirSlots(t *testing.T) {
	for seed := range uint64(12) {
		r := rand.New(rand.NewPCG(seed, 17))
		q := Quota{
			Limit:    1 + r.IntN(20),
			Window:   time.Duration(10+r.IntN(990)) * time.Millisecond,
			MaxDelay: time.Duration(r.IntN(2000)) * time.Millisecond,
			Mode:     Counter,
		}
		t.Run(fmt.Sprintf("seed=%d/%v", seed, q), func(t *testing.T) {
			mr := miniredis.RunT(t)
			rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
			t.Cleanup(func() { rdb.Close() })
			ctx := context.Background()
			script := lua.Counter()
			const key = "b:{t}:ctr"
			width := q.Window.Microseconds() / counterBuckets
			span := (q.Window.Microseconds() + width - 1) / width
			recorded := map[int64]int64{} // bucket -> entries recorded, less released
			var slots []int64             // recorded slots, for releases
			now := time.Unix(1_780_000_000, 0).Add(time.Duration(r.IntN(1e6)) * time.Microsecond)
			for step := range 300 {
				now = now.Add(time.Duration(r.ExpFloat64() * float64(q.Window) / float64(q.Limit)))
				mr.SetTime(now)
				if len(slots) > 0 && r.IntN(6) == 0 {
					i := r.IntN(len(slots))
					at := slots[i]
					args := append(appendCounterArgs(nil, q, 1, 1, 0), at)
					res, err := script.Run(ctx, rdb, []string{key}, args...).Int64Slice()
					if err != nil {
						t.Fatal(err)
					}
					if res[1] == 1 {
						recorded[at/width]--
						slots = append(slots[:i], slots[i+1:]...)
					}
					continue
				}
				var nb int64
				if r.IntN(4) == 0 {
					nb = now.Add(time.Duration(r.Int64N(int64(q.Window)))).UnixMicro()
				}
				n := 1 + r.IntN(3)
				res, err := script.Run(ctx, rdb, []string{key}, appendCounterArgs(nil, q, 1, n, nb)...).Int64Slice()
				if err != nil {
					t.Fatal(err)
				}
				any := false
				for j := range n {
					if code, at := res[1+3*j], res[2+3*j]; code == 0 || code == 1 {
						recorded[at/width]++
						slots = append(slots, at)
						any = true
					}
				}
				if !any {
					continue
				}
				h, err := rdb.HGetAll(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				cur := res[0] / width
				var sum int64
				for f, v := range h {
					b, ok := strings.CutPrefix(f, "0:")
					if !ok {
						continue
					}
					i, _ := strconv.ParseInt(b, 10, 64)
					c, _ := strconv.ParseInt(v, 10, 64)
					sum += c
					if i < cur-2*span-1 {
						t.Fatalf("step %d: bucket %d is %d buckets old, more than two windows", step, i, cur-i)
					}
					if i >= cur-span && c != recorded[i] {
						t.Fatalf("step %d: bucket %d holds %d, want the %d recorded in it", step, i, c, recorded[i])
					}
				}
				for i, c := range recorded {
					if _, ok := h["0:"+strconv.FormatInt(i, 10)]; !ok && i >= cur-span && c != 0 {
						t.Fatalf("step %d: bucket %d is missing; %d were recorded in it", step, i, c)
					}
				}
				if total, _ := strconv.ParseInt(h["n"], 10, 64); total != sum {
					t.Fatalf("step %d: n is %d, the buckets hold %d", step, total, sum)
				}
			}
		})
	}
}
