package admission

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admitq/admitq/internal/redistest"
)

// TestBusyProducerIsNoOutage: the producer's own callers keep its CPU
// busy (3 gates, 48 goroutines each, calling Admit in a tight loop over 3
// tenants, nearly all answered by the deny cache), while Redis is healthy.
// No decision fails with ErrUnavailable, and no breaker opens. (Without
// the yield in locally answered decisions, 98-337 of about a million
// failed: the callers kept the goroutines that read Redis's replies off
// the CPU for up to 1.5 s. With a plain runtime.Gosched, under -race with
// 4 CPU burners beside it, 6 of 8 runs still failed, 3-143 calls each:
// the timeout ran from when the decision began, and the callers spent
// 100-250 ms of it waiting for a processor before their requests were
// even sent; see committer.do and committer.yield.) The outage tests
// beside it, in failure_test.go and chaos_test.go, show that a real
// outage is still reported within the timeout.
func TestBusyProducerIsNoOutage(t *testing.T) {
	srv := redistest.Start(t)
	q := Quota{Limit: 20, Window: 500 * time.Millisecond}
	const (
		gates   = 3
		callers = 48
		tenants = 3
		runFor  = 3 * time.Second
	)
	gs := make([]*Gate, gates)
	for i := range gs {
		gs[i] = New(srv.Client(t), StaticQuotas{Default: &q})
		defer gs[i].Close()
	}
	var decisions, local, unavailable, other atomic.Int64
	var firstErr atomic.Value // string: errors of different types would panic Value
	var slowest atomic.Int64
	deadline := time.Now().Add(runFor)
	var wg sync.WaitGroup
	for gi, g := range gs {
		for c := range callers {
			tenant := fmt.Sprintf("busy%d", (gi*callers+c)%tenants)
			wg.Go(func() {
				for time.Now().Before(deadline) {
					start := time.Now()
					d, err := g.Admit(t.Context(), tenant)
					if took := int64(time.Since(start)); took > slowest.Load() {
						slowest.Store(took) // racy max: a figure for the log only
					}
					decisions.Add(1)
					switch {
					case errors.Is(err, ErrUnavailable):
						unavailable.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					case err != nil:
						other.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					case d.Local:
						local.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	t.Logf("%d decisions (%d local), %d unavailable, %d other errors, slowest %v",
		decisions.Load(), local.Load(), unavailable.Load(), other.Load(), time.Duration(slowest.Load()).Round(time.Millisecond))
	if n := unavailable.Load() + other.Load(); n > 0 {
		t.Errorf("%d of %d decisions failed on a healthy Redis; first: %v", n, decisions.Load(), firstErr.Load())
	}
	for i, g := range gs {
		if g.brk.isOpen() {
			t.Errorf("gate %d: breaker open on a healthy Redis", i)
		}
	}
	if local.Load() == 0 {
		t.Error("no decision was answered locally: the deny cache did not load the CPU")
	}
}
