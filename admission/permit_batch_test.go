package admission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// permitCalls counts permit.lua's calls (EVALSHA), the capped requests
// they carried (four keys each) and the round trips that carried them: a
// pipeline, or a command sent alone.
type permitCalls struct {
	sha                    string
	calls, requests, trips atomic.Int64
	most                   atomic.Int64 // the most requests one call carried
}

func (h *permitCalls) count(cmds []redis.Cmder) {
	calls := int64(0)
	for _, cmd := range cmds {
		a := cmd.Args()
		if len(a) < 3 || a[0] != "evalsha" || a[1] != h.sha {
			continue
		}
		keys, _ := a[2].(int)
		n := int64(keys / 4)
		calls++
		h.requests.Add(n)
		for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
		}
	}
	if calls > 0 {
		h.calls.Add(calls)
		h.trips.Add(1)
	}
}

func (h *permitCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *permitCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.count([]redis.Cmder{cmd}); return next(ctx, cmd) }
}
func (h *permitCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.count(cmds); return next(ctx, cmds) }
}

// TestCappedCallsSharePipelines: a capped tenant's request goes through
// the group commit, so concurrent ones share round trips and, on one
// Redis, permit.lua calls (a batch), each still decided as alone: the
// first MaxInFlight tasks of each tenant take permits and the rest park.
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
	requests, calls, trips := hook.requests.Load(), hook.calls.Load(), hook.trips.Load()
	if requests != callers*each {
		t.Fatalf("permit.lua calls carried %d requests for %d decisions of one task each", requests, callers*each)
	}
	if calls >= requests || trips >= requests {
		t.Fatalf("%d requests took %d permit.lua calls in %d round trips: none shared one", requests, calls, trips)
	}
	t.Logf("%d requests in %d permit.lua calls and %d round trips, at most %d in a call", requests, calls, trips, hook.most.Load())
}

// permitArgs is permit.lua's ARGV for tasks of a tenant capped by q.
func permitArgs(q Quota, gran, nb int64, tasks []Ref) []any {
	args := []any{q.Limit, q.Window.Microseconds(), q.MaxDelay.Microseconds(), gran,
		q.MaxInFlight, q.parkedBound(), time.Minute.Microseconds(), nb, len(tasks)}
	for _, t := range tasks {
		args = append(args, t.ID, t.member())
	}
	return args
}

func permitKeysOf(tenant string) []string {
	return []string{logKey("p", tenant), permitsKey("p", tenant), parkedKey("p", tenant), notBeforeKey("p", tenant)}
}

// TestPermitBatchMatchesSingles: permit.lua called for several tenants at
// once (a batch, as the committer sends capped requests on one Redis)
// decides each as a call of its own would, one after another at the same
// Redis time, and leaves the same logs, permits, parked tasks, not-before
// times and expiries. The batches repeat tenants, mix quotas, caps,
// granularities and not-before times, retry tasks, and span deferrals,
// parking, full backlogs and rejections.
func TestPermitBatchMatchesSingles(t *testing.T) {
	c := newBatchCheck(t, lua.Permit(), true)
	tenants := []string{"a", "b", "c"}
	var all []string
	for _, tenant := range tenants {
		all = append(all, permitKeysOf(tenant)...)
	}
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 31))
		c.flush()
		var quotas []Quota
		for range 2 {
			quotas = append(quotas, Quota{
				Limit:       2 + r.IntN(12),
				Window:      time.Duration(100+r.IntN(900)) * time.Millisecond,
				MaxDelay:    time.Duration(r.IntN(600)) * time.Millisecond,
				MaxInFlight: 1 + r.IntN(4),
				MaxParked:   1 + r.IntN(4),
			})
		}
		var issued []Ref
		now := time.Unix(1_780_000_000, 0).Add(time.Duration(r.IntN(1e6)) * time.Microsecond)
		for step := range 30 {
			now = now.Add(time.Duration(r.Int64N(int64(150 * time.Millisecond))))
			c.at(now)
			for range 1 + r.IntN(4) {
				tenant, q := tenants[r.IntN(len(tenants))], quotas[r.IntN(len(quotas))]
				gran := []int64{1, 1, 1000}[r.IntN(3)]
				var nb int64
				if r.IntN(4) == 0 {
					nb = now.UnixMicro() + r.Int64N(q.Window.Microseconds())
				}
				var tasks []Ref
				for range 1 + r.IntN(3) {
					if len(issued) > 0 && r.IntN(5) == 0 {
						tasks = append(tasks, issued[r.IntN(len(issued))]) // a retry
						continue
					}
					ref := Ref{ID: fmt.Sprintf("id%d", len(issued)), Queue: "q"}
					issued = append(issued, ref)
					tasks = append(tasks, ref)
				}
				c.add(permitKeysOf(tenant), permitArgs(q, gran, nb, tasks))
			}
			c.check(fmt.Sprintf("seed %d step %d", seed, step), all)
		}
	}
}

// TestPermitBatchWrongTypeWritesNothing: a batch in which a tenant's set,
// or the not-before hash a task would be parked in, has the wrong type
// fails whole, before any tenant is written (the committer then decides
// each alone), also when the tenant comes again in the batch and only its
// second request parks with a not-before time.
func TestPermitBatchWrongTypeWritesNothing(t *testing.T) {
	onBothServers(t, testPermitBatchWrongType)
}

func testPermitBatchWrongType(t *testing.T, rdb *redis.Client) {
	ctx := t.Context()
	q := Quota{Limit: 10, Window: time.Second, MaxInFlight: 1, MaxParked: 5}
	later := time.Now().Add(time.Hour).UnixMicro() // ahead of either server's clock
	for i, bad := range []struct {
		key string
		nbs []int64 // b's requests' not-before times
	}{
		{logKey("p", "b"), []int64{0}},
		{permitsKey("p", "b"), []int64{0}},
		{parkedKey("p", "b"), []int64{0}},
		{notBeforeKey("p", "b"), []int64{later}},
		{notBeforeKey("p", "b"), []int64{0, later}},
	} {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, bad.key, "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		tasks := []Ref{{ID: "1", Queue: "q"}, {ID: "2", Queue: "q"}}
		args := append([]any{"batch"}, permitArgs(q, 1, 0, tasks)...)
		keys := permitKeysOf("a")
		for j, nb := range bad.nbs {
			args = append(args, permitArgs(q, 1, nb, []Ref{{ID: fmt.Sprint(3 + 2*j), Queue: "q"}, {ID: fmt.Sprint(4 + 2*j), Queue: "q"}})...)
			keys = append(keys, permitKeysOf("b")...)
		}
		if err := lua.Permit().Run(ctx, rdb, keys, args...).Err(); err == nil {
			t.Fatalf("case %d: a batch with %s a string succeeded", i, bad.key)
		}
		for _, key := range permitKeysOf("a") {
			if n := rdb.Exists(ctx, key).Val(); n != 0 {
				t.Fatalf("case %d: the batch failed on %s but wrote %s", i, bad.key, key)
			}
		}
	}
}

// TestBatchSplitsAfterScriptsAreLost: a batch that meets Redis without its
// scripts goes again by EVAL, and when that fails on one tenant's key of
// the wrong type, each tenant goes again alone: the others are decided,
// and only that tenant gets the error. For capped tenants (permit.lua)
// and uncapped ones (admit.lua) alike.
func TestBatchSplitsAfterScriptsAreLost(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	for _, capped := range []bool{false, true} {
		t.Run(fmt.Sprintf("capped=%v", capped), func(t *testing.T) {
			q := Quota{Limit: 10, Window: time.Minute}
			if capped {
				q.MaxInFlight = 5
			}
			prefix := fmt.Sprintf("split%v", capped)
			g := New(rdb, StaticQuotas{Default: &q}, WithPrefix(prefix), WithTimeout(5*time.Second))
			defer g.Close()
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.Set(ctx, logKey(prefix, "b"), "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			var batch []*request
			for _, tenant := range []string{"a", "b", "c"} {
				tasks := []Ref{{ID: tenant + "1", Queue: "q"}, {ID: tenant + "2", Queue: "q"}}
				r := &request{tenant: tenant, key: logKey(prefix, tenant), q: q, gran: g.gran, ids: refIDs(tasks), done: make(chan struct{})}
				if capped {
					r.permit = g.newPermitCall(tenant, q, tasks, 0)
				}
				batch = append(batch, r)
			}
			g.commit.flush(batch, g.forget) // on one Redis, flush delivers before it returns
			for _, r := range batch {
				<-r.done
				switch {
				case r.tenant == "b" && r.err == nil:
					t.Errorf("tenant b, whose log is a string, was decided: %+v", r.ds)
				case r.tenant != "b" && r.err != nil:
					t.Errorf("tenant %s: %v", r.tenant, r.err)
				case r.tenant != "b" && (len(r.ds) != 2 || r.ds[0].Outcome != Admitted || r.ds[1].Outcome != Admitted):
					t.Errorf("tenant %s: %+v, want both admitted", r.tenant, r.ds)
				}
			}
		})
	}
}
