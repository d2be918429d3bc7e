package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestMemoryPerTenant measures what one tenant costs Redis in each mode
// (MEMORY USAGE ... SAMPLES 0, the key whole), with its window full: Limit
// admissions spread over one window, through a gate, with generated IDs.
// A log holds an entry per admission; a counter's hash a field per bucket
// (a tenth of the window) however many admissions they count. It logs the
// table docs/performance.md gives, and checks the counter stays within
// its bound: flat in the limit, and under the log's from Limit 1,000 on.
func TestMemoryPerTenant(t *testing.T) {
	if testing.Short() {
		t.Skip("admits 200,000 requests")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	const window = 2 * time.Second
	type cell struct{ log, counter int64 }
	limits := []int{10, 1_000, 100_000}
	got := map[int]cell{}
	for _, limit := range limits {
		var c cell
		for _, mode := range []admission.Mode{admission.Log, admission.Counter} {
			tenant := fmt.Sprintf("mem-%v-%d", mode, limit)
			bytes := fillWindow(ctx, t, rdb, admission.Quota{Limit: limit, Window: window, Mode: mode}, tenant)
			if mode == admission.Log {
				c.log = bytes
			} else {
				c.counter = bytes
			}
		}
		got[limit] = c
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "Limit\tLog bytes/tenant\tper entry\tCounter bytes/tenant\t")
	for _, limit := range limits {
		c := got[limit]
		fmt.Fprintf(tw, "%d\t%d\t%.1f\t%d\t\n", limit, c.log, float64(c.log)/float64(limit), c.counter)
	}
	tw.Flush()
	t.Logf("one tenant with a full window of %v (MEMORY USAGE, SAMPLES 0):\n%s", window, b.String())
	small, large := got[limits[0]].counter, got[limits[len(limits)-1]].counter
	if large > 2*small {
		t.Errorf("Counter mode: %d bytes at Limit %d, %d at %d; want flat in the limit", small, limits[0], large, limits[len(limits)-1])
	}
	for _, limit := range limits[1:] {
		if c := got[limit]; c.counter >= c.log {
			t.Errorf("Limit %d: Counter mode %d bytes, Log mode %d; want the counter smaller", limit, c.counter, c.log)
		}
	}
}

// fillWindow admits quota.Limit requests of tenant in ten steps over one
// window, so that a counter fills its buckets as traffic would, and
// returns the bytes its key takes.
func fillWindow(ctx context.Context, t *testing.T, rdb *redis.Client, q admission.Quota, tenant string) int64 {
	t.Helper()
	g := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithPrefix("mem"), admission.WithTimeout(10*time.Second))
	defer g.Close()
	const steps, callers = 10, 32
	start := time.Now()
	for step := range steps {
		time.Sleep(time.Until(start.Add(time.Duration(step) * q.Window / steps)))
		n := q.Limit*(step+1)/steps - q.Limit*step/steps
		var wg sync.WaitGroup
		errs := make(chan error, callers)
		for c := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := c; i < n; i += callers {
					d, err := g.Admit(ctx, tenant)
					if err == nil && d.Outcome != admission.Admitted {
						err = fmt.Errorf("%s: %v at %d of %d", tenant, d.Outcome, i, n)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	key := "mem:{" + tenant + "}:log"
	if q.Mode == admission.Counter {
		key = "mem:{" + tenant + "}:cnt"
	}
	bytes, err := rdb.MemoryUsage(ctx, key, 0).Result()
	if err != nil {
		t.Fatalf("MEMORY USAGE %s: %v", key, err)
	}
	return bytes
}
