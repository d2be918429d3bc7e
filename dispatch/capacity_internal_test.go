package dispatch

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// commandStat reads command name's calls and µs from INFO commandstats
// (those a script runs included).
func commandStat(tb testing.TB, rdb *redis.Client, name string) (calls, usec int64) {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":"); ok {
			fmt.Sscanf(rest, "calls=%d,usec=%d", &calls, &usec)
		}
	}
	return calls, usec
}

// A park takes the queue's capacity from the summary of its workers that
// the last call to read them left, so that it costs the same however many
// workers serve the queue: a worker that joins, comes back, leaves or
// shortens its record's life writes the summary anew with its turn, and
// one that joins without a turn of this version (an older worker of a
// mixed fleet) counts within SUMMARY_FOR.
func TestAParkDoesNotReadTheFleet(t *testing.T) {
	ctx := context.Background()
	d, rdb, _ := rig(t, q1)
	k := d.keysFor("default")
	join := func(member string, ttl int) {
		t.Helper()
		if _, err := d.run(ctx, d.scripts.dispatch, "default", member, ttl, 0, 0, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	summary := func(what, want string) {
		t.Helper()
		if got := rdb.HGet(ctx, k.meta, "cw").Val(); got != want {
			t.Errorf("%s: summary %q, want %q", what, got, want)
		}
	}
	park := func(id string, want Verdict) {
		t.Helper()
		tk, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: id}, q1)
		if err != nil || tk.Verdict != want {
			t.Fatalf("park %s: %v, %v; want %v", id, tk.Verdict, err, want)
		}
	}
	for i := range 32 {
		join(fmt.Sprintf("w%d|1|1", i), 600_000_000)
	}
	summary("after 32 workers joined", "1|1|32")
	began := time.Now()     // the dispatcher's mode, read by this first park, is kept a second
	park("first", Straight) // its cap of 1 holds the others
	park("second", Wait)
	join("w32|1|1", 600_000_000) // a join writes the summary anew
	summary("after one more joined", "1|1|33")
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		park("p"+strconv.Itoa(i), Wait)
	}
	if n, _ := commandStat(t, rdb, "zrange"); n != 0 && time.Since(began) < 900*time.Millisecond {
		t.Errorf("50 parks beside 33 workers ran %d ZRANGE; want none", n)
	}

	// A record that lapses drops out at its expiry; its worker's next
	// turn counts it again.
	join("short|4|1", 1000)
	summary("after a worker joined for a millisecond", "1|1|37")
	time.Sleep(5 * time.Millisecond)
	park("after-lapse", Wait)
	summary("once its record lapsed", "1|1|33")
	join("short|4|1", 600_000_000)
	summary("once it came back", "1|1|37")

	// One leaves (a turn with ttl 0): its turn writes the summary at once,
	// and the next call, once its record lapsed, counts it out.
	join("w0|1|1", 0)
	time.Sleep(time.Millisecond)
	park("after-leave", Wait)
	summary("after one left", "1|1|36")

	// An older worker's record, written without a turn of this version,
	// counts within SUMMARY_FOR.
	if err := rdb.ZAdd(ctx, k.workers, redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMicro()), Member: "old|8|1"}).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	park("after-old", Wait)
	summary("a second after an older worker joined", "1|1|44")
}

// BenchmarkParkBesideWorkers parks tasks of a tenant whose cap holds them
// waiting, beside 1, 16 and 64 workers' records of 64 workers in all, and
// reports Redis's own time a park (redis-µs/park, from INFO
// commandstats), which does not grow with the records.
func BenchmarkParkBesideWorkers(b *testing.B) {
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			ctx := context.Background()
			d, rdb, _ := rig(b, q1)
			for i := range n {
				member := fmt.Sprintf("w%d|%d|1", i, 64/n)
				if _, err := d.run(ctx, d.scripts.dispatch, "default", member, 600_000_000, 0, 0, 0, 0, 0); err != nil {
					b.Fatal(err)
				}
			}
			q := q1
			q.MaxParked = 1 << 30
			park := func(id string) {
				if _, err := d.Park(ctx, Task{Queue: "default", Tenant: "t", ID: id}, q); err != nil {
					b.Fatal(err)
				}
			}
			park("first")
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				park(strconv.Itoa(i))
			}
			b.StopTimer()
			calls, usec := commandStat(b, rdb, "fcall")
			b.ReportMetric(float64(usec)/float64(calls), "redis-µs/park")
		})
	}
}
