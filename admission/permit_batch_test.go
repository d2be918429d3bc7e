package admission

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// permitCalls counts permit.lua's calls (EVALSHA) and the round trips that
// carried them: a pipeline, or a command sent alone.
type permitCalls struct {
	sha          string
	calls, trips atomic.Int64
	most         atomic.Int64 // the most calls one pipeline carried
}

func (h *permitCalls) count(cmds []redis.Cmder) {
	n := int64(0)
	for _, cmd := range cmds {
		if a := cmd.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == h.sha {
			n++
		}
	}
	if n == 0 {
		return
	}
	h.calls.Add(n)
	h.trips.Add(1)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
}

func (h *permitCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *permitCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.count([]redis.Cmder{cmd}); return next(ctx, cmd) }
}
func (h *permitCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.count(cmds); return next(ctx, cmds) }
}

// TestCappedCallsSharePipelines: a capped tenant's permit.lua call goes
// through the group commit, so concurrent ones share round trips, each
// still a script call of its own that decides its tasks as alone: the
// first MaxInFlight of each tenant take permits and the rest park.
func TestCappedCallsSharePipelines(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	hook := &permitCalls{sha: lua.Permit().Hash()}
	rdb.AddHook(hook)
	q := Quota{Limit: 1000, Window: time.Minute, MaxInFlight: 3}
	g := New(rdb, StaticQuotas{Default: &q}, WithTimeout(5*time.Second))
	defer g.Close()
	const callers, each = 32, 10
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			tenant := fmt.Sprintf("t%d", c)
			for i := range each {
				ds, err := g.AdmitTasks(t.Context(), tenant, []Ref{{ID: fmt.Sprintf("%d-%d", c, i), Queue: "q"}})
				if err != nil {
					errs <- err
					return
				}
				want := Admitted
				if i >= q.MaxInFlight {
					want = Parked
				}
				if ds[0].Outcome != want {
					errs <- fmt.Errorf("%s task %d: %v, want %v", tenant, i, ds[0].Outcome, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	calls, trips := hook.calls.Load(), hook.trips.Load()
	if calls != callers*each {
		t.Fatalf("%d permit.lua calls for %d decisions of one task each", calls, callers*each)
	}
	if trips >= calls {
		t.Fatalf("%d permit.lua calls took %d round trips: none shared a pipeline", calls, trips)
	}
	t.Logf("%d permit.lua calls in %d round trips, at most %d in one", calls, trips, hook.most.Load())
}
