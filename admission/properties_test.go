package admission_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// variants runs a property with group commit and the deny cache on and
// off: they must not change what is decided.
var variants = []struct {
	name string
	opts []admission.Option
}{
	{"batched", nil},
	{"unbatched", []admission.Option{admission.WithBatching(false), admission.WithDenyCache(false)}},
}

func static(q admission.Quota) admission.StaticQuotas {
	return admission.StaticQuotas{Default: &q}
}

// slotsOf returns the slots, in µs, that decisions took.
func slotsOf(ds []admission.Decision) []int64 {
	var s []int64
	for _, d := range ds {
		if d.Outcome != admission.Rejected {
			s = append(s, d.At.UnixMicro())
		}
	}
	return s
}

// checkBound fails when some interval (t-W, t] holds more than limit of
// slots: with slots sorted, slot i+limit must be at least W after slot i.
func checkBound(t *testing.T, what string, slots []int64, q admission.Quota) {
	t.Helper()
	slots = slices.Clone(slots)
	slices.Sort(slots)
	w := q.Window.Microseconds()
	for i := 0; i+q.Limit < len(slots); i++ {
		if slots[i+q.Limit]-slots[i] < w {
			t.Fatalf("%s: %d slots within %v: %v … %v", what, q.Limit+1, q.Window,
				time.UnixMicro(slots[i]).Format(time.StampMicro), time.UnixMicro(slots[i+q.Limit]).Format(time.StampMicro))
		}
	}
}

// TestBound: for every tenant, every interval of length W holds at most L
// slots, checked over every decision returned to 64 goroutines on four
// gates with their own connections, and over the logs in Redis.
func TestBound(t *testing.T) {
	srv := redistest.Start(t)
	q := admission.Quota{Limit: 20, Window: 200 * time.Millisecond, MaxDelay: 300 * time.Millisecond}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			prefix := "bound-" + v.name
			gates := make([]*admission.Gate, 4)
			for i := range gates {
				// A generous timeout: 64 callers on a loaded machine can wait
				// past the default for Redis, and the bound, not latency, is
				// what is checked here.
				gates[i] = admission.New(srv.Client(t), static(q), append([]admission.Option{
					admission.WithPrefix(prefix), admission.WithTimeout(5 * time.Second)}, v.opts...)...)
				t.Cleanup(func() { gates[i].Close() })
			}
			r := floodAndCheckBound(t, boundRun{q: q, gates: gates, tenants: []string{"t0", "t1", "t2", "t3", "t4"},
				prefix: prefix, logs: srv.Client(t), d: 1500 * time.Millisecond})
			t.Logf("%d decisions (%d from the deny cache), %d took slots, %d log snapshots checked", r.total, r.local, r.admitted, r.snapshots)
		})
	}
	// Counter mode, its tenants sharing counter.lua calls as batches: the
	// decisions hold the bound (it keeps no log to snapshot).
	t.Run("counter", func(t *testing.T) {
		q := q
		q.Mode = admission.Counter
		gates := make([]*admission.Gate, 4)
		for i := range gates {
			gates[i] = admission.New(srv.Client(t), static(q), admission.WithPrefix("bound-counter"), admission.WithTimeout(5*time.Second))
			t.Cleanup(func() { gates[i].Close() })
		}
		r := floodAndCheckBound(t, boundRun{q: q, gates: gates, tenants: []string{"t0", "t1", "t2", "t3", "t4"},
			prefix: "bound-counter", logs: srv.Client(t), d: 1500 * time.Millisecond})
		t.Logf("%d decisions (%d from the deny cache), %d took slots", r.total, r.local, r.admitted)
	})
}

// boundRun is one flood for the bound property.
type boundRun struct {
	q       admission.Quota
	gates   []*admission.Gate
	tenants []string
	prefix  string
	logs    redis.Cmdable // reads the logs for snapshots
	d       time.Duration
}

type boundResult struct{ total, admitted, local, snapshots int }

// floodAndCheckBound has 64 goroutines, spread over r's gates, admit
// r.tenants' requests (singly and in batches) for r.d while the logs are
// snapshotted, then checks the bound over every tenant's decisions and
// every snapshot of its log.
func floodAndCheckBound(t *testing.T, r boundRun) boundResult {
	t.Helper()
	const workers = 64
	var (
		mu        sync.Mutex
		decisions = map[string][]admission.Decision{}
		snapshots = map[string][][]int64{}
	)
	// The flood lasts r.d, and on past that until some request has been
	// rejected (10 r.d at most): a loaded machine may need longer for the
	// load to reach the limit, which is what the bound is about.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var rejected atomic.Bool
	go func() {
		defer cancel()
		end, limit := time.Now().Add(r.d), time.Now().Add(10*r.d)
		for time.Now().Before(limit) && (time.Now().Before(end) || !rejected.Load()) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			g := r.gates[w%len(r.gates)]
			for i := 0; ctx.Err() == nil; i++ {
				tenant := r.tenants[(w+i)%len(r.tenants)]
				var ds []admission.Decision
				var err error
				if i%5 == 0 {
					ds, err = g.AdmitBatch(ctx, tenant, []string{fmt.Sprintf("b%d.%d.a", w, i), fmt.Sprintf("b%d.%d.b", w, i)})
				} else {
					var d admission.Decision
					d, err = g.Admit(ctx, tenant)
					ds = []admission.Decision{d}
				}
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					t.Errorf("admit: %v", err)
					return
				}
				if ds[len(ds)-1].Outcome == admission.Rejected {
					rejected.Store(true)
				}
				mu.Lock()
				decisions[tenant] = append(decisions[tenant], ds...)
				mu.Unlock()
			}
		})
	}
	wg.Go(func() { // snapshot the logs while they churn
		for ctx.Err() == nil {
			for _, tenant := range r.tenants {
				zs, err := r.logs.ZRangeWithScores(context.Background(), r.prefix+":{"+tenant+"}:log", 0, -1).Result()
				if err != nil {
					t.Errorf("zrange: %v", err)
					return
				}
				s := make([]int64, len(zs))
				for j, z := range zs {
					s[j] = int64(z.Score)
				}
				mu.Lock()
				snapshots[tenant] = append(snapshots[tenant], s)
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	wg.Wait()

	var res boundResult
	for _, tenant := range r.tenants {
		ds := decisions[tenant]
		res.total += len(ds)
		slots := slotsOf(ds)
		res.admitted += len(slots)
		if len(slots) == 0 {
			t.Errorf("tenant %s: no slots", tenant)
		}
		for _, d := range ds {
			if d.Local {
				res.local++
			}
		}
		checkBound(t, "decisions of "+tenant, slots, r.q)
		for i, snap := range snapshots[tenant] {
			checkBound(t, fmt.Sprintf("log snapshot %d of %s", i, tenant), snap, r.q)
		}
		res.snapshots += len(snapshots[tenant])
	}
	if res.admitted == 0 || res.admitted == res.total {
		t.Fatalf("%d of %d decisions took a slot: the load did not reach the limit", res.admitted, res.total)
	}
	return res
}

// TestFIFO: slots never go backwards in request order, within a batch and
// across calls, while other gates compete for the same tenant.
func TestFIFO(t *testing.T) {
	srv := redistest.Start(t)
	q := admission.Quota{Limit: 5, Window: 100 * time.Millisecond, MaxDelay: time.Second}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			// Order, not latency, is checked: nine busy callers must not
			// fail on the default timeout when the machine is loaded.
			opts := append([]admission.Option{admission.WithPrefix("fifo-" + v.name), admission.WithTimeout(5 * time.Second)}, v.opts...)
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			for range 8 {
				g := admission.New(srv.Client(t), static(q), opts...)
				wg.Go(func() {
					for ctx.Err() == nil {
						if _, err := g.Admit(ctx, "fifo"); err != nil && ctx.Err() == nil {
							t.Errorf("noise: %v", err)
						}
					}
				})
			}
			g := admission.New(srv.Client(t), static(q), opts...)
			var last int64
			for i := range 200 {
				ids := []string{fmt.Sprintf("s%d.a", i), fmt.Sprintf("s%d.b", i), fmt.Sprintf("s%d.c", i)}
				ds, err := g.AdmitBatch(ctx, "fifo", ids[:1+i%3])
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range ds {
					if d.Outcome == admission.Rejected {
						continue
					}
					if at := d.At.UnixMicro(); at < last {
						t.Fatalf("request %d got slot %v, before the earlier slot %v", i, d.At, time.UnixMicro(last))
					} else {
						last = at
					}
				}
			}
			cancel()
			wg.Wait()
		})
	}
}

// TestWorkConserving: a request is admitted now whenever the bound allows
// it: with fewer than L slots in (now-W, now] and none reserved ahead, the
// outcome must be Admitted. Checked over sequential requests at random
// pacing, against the slots the gate itself handed out.
func TestWorkConserving(t *testing.T) {
	srv := redistest.Start(t)
	q := admission.Quota{Limit: 4, Window: 50 * time.Millisecond, MaxDelay: 100 * time.Millisecond}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			g := admission.New(srv.Client(t), static(q), append([]admission.Option{admission.WithPrefix("wc-" + v.name)}, v.opts...)...)
			var slots []int64
			admittedNow, deferred := 0, 0
			for i := range 300 {
				d, err := g.Admit(t.Context(), "wc")
				if err != nil {
					t.Fatal(err)
				}
				now, w := d.Now.UnixMicro(), q.Window.Microseconds()
				inWindow, ahead := 0, false
				for _, s := range slots {
					if s > now-w && s <= now {
						inWindow++
					}
					ahead = ahead || s > now
				}
				free := inWindow < q.Limit && !ahead
				switch {
				case free && d.Outcome != admission.Admitted:
					t.Fatalf("request %d: %d of %d slots in the window and none ahead, but %v until %v", i, inWindow, q.Limit, d.Outcome, d.At)
				case !free && d.Outcome == admission.Admitted:
					t.Fatalf("request %d: admitted with %d slots in the window (ahead: %v)", i, inWindow, ahead)
				case d.Outcome == admission.Admitted:
					admittedNow++
				case d.Outcome == admission.Deferred:
					deferred++
				}
				if d.Outcome != admission.Rejected {
					slots = append(slots, d.At.UnixMicro())
				}
				if i%7 == 0 {
					time.Sleep(time.Duration(i%5) * 10 * time.Millisecond)
				}
			}
			if admittedNow == 0 || deferred == 0 {
				t.Fatalf("admitted %d, deferred %d: pacing did not exercise both", admittedNow, deferred)
			}
		})
	}
}

// TestRejectionRecordsNothing: a rejected request leaves the log, and its
// expiry, as they were, whether it is alone or the tail of a batch.
func TestRejectionRecordsNothing(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	q := admission.Quota{Limit: 3, Window: time.Minute}
	g := admission.New(rdb, static(q), admission.WithDenyCache(false))
	ctx := t.Context()
	ds, err := g.AdmitBatch(ctx, "r", []string{"a", "b", "c", "d", "e"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, d.Outcome.String())
	}
	if want := []string{"admitted", "admitted", "admitted", "rejected", "rejected"}; !slices.Equal(got, want) {
		t.Fatalf("batch outcomes = %v, want %v", got, want)
	}
	if ds[3].ID != "" || !ds[3].At.Equal(ds[0].At.Add(q.Window)) {
		t.Fatalf("rejection = %+v, want no ID and At = first slot + window", ds[3])
	}
	key := "admitq:{r}:log"
	before, _ := rdb.Dump(ctx, key).Result()
	ttlBefore, _ := rdb.PTTL(ctx, key).Result()
	for range 10 {
		d, err := g.Admit(ctx, "r")
		if err != nil || d.Outcome != admission.Rejected {
			t.Fatalf("Admit = %+v, %v; want rejected", d, err)
		}
	}
	after, _ := rdb.Dump(ctx, key).Result()
	ttlAfter, _ := rdb.PTTL(ctx, key).Result()
	if before != after {
		t.Fatal("rejections changed the log")
	}
	if ttlAfter > ttlBefore {
		t.Fatalf("rejections extended the expiry: %v -> %v", ttlBefore, ttlAfter)
	}
}

// TestIdempotentID: asking again for an ID in the log returns its slot and
// takes no second one, also when 32 callers ask at once.
func TestIdempotentID(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	q := admission.Quota{Limit: 2, Window: time.Minute, MaxDelay: 5 * time.Minute}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			prefix := "idem-" + v.name
			g := admission.New(rdb, static(q), append([]admission.Option{admission.WithPrefix(prefix)}, v.opts...)...)
			ctx := t.Context()
			for _, id := range []string{"x", "y", "z"} { // admitted, admitted, deferred
				first, err := g.AdmitID(ctx, "i", id)
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				results := make([]admission.Decision, 32)
				for i := range results {
					wg.Go(func() {
						d, err := g.AdmitID(ctx, "i", id)
						if err != nil {
							t.Error(err)
						}
						results[i] = d
					})
				}
				wg.Wait()
				for _, d := range results {
					if !d.Existing || d.Outcome != first.Outcome || !d.At.Equal(first.At) || d.ID != id {
						t.Fatalf("retry of %q = %+v, want the original %+v marked Existing", id, d, first)
					}
				}
			}
			if n := rdb.ZCard(ctx, prefix+":{i}:log").Val(); n != 3 {
				t.Fatalf("log holds %d entries, want 3", n)
			}
		})
	}
}

// TestMemoryBound: a tenant's log never holds more than L × (1 + D/W)
// entries however hard it is flooded. It also reports bytes per entry.
func TestMemoryBound(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	for _, limit := range []int{100, 1000} {
		t.Run("limit="+strconv.Itoa(limit), func(t *testing.T) {
			q := admission.Quota{Limit: limit, Window: 300 * time.Millisecond, MaxDelay: 600 * time.Millisecond}
			prefix := "mem" + strconv.Itoa(limit)
			g := admission.New(rdb, static(q), admission.WithPrefix(prefix))
			key := prefix + ":{m}:log"
			bound := int64(limit * (1 + int(q.MaxDelay/q.Window)))
			ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
			defer cancel()
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for ctx.Err() == nil {
						_, _ = g.AdmitBatch(ctx, "m", []string{strconv.Itoa(int(time.Now().UnixNano())) + "a", strconv.Itoa(int(time.Now().UnixNano())) + "b"})
					}
				})
			}
			peak := int64(0)
			for ctx.Err() == nil {
				n := rdb.ZCard(context.Background(), key).Val()
				peak = max(peak, n)
				if n > bound {
					t.Fatalf("log holds %d entries, bound is L×(1+D/W) = %d", n, bound)
				}
			}
			wg.Wait()
			if peak < bound/2 {
				t.Fatalf("peak %d entries: the flood did not fill the log (bound %d)", peak, bound)
			}
		})
	}
	// Bytes per entry with the gate's own short IDs.
	for _, limit := range []int{100, 1000} {
		q := admission.Quota{Limit: limit, Window: time.Minute}
		prefix := "bytes" + strconv.Itoa(limit)
		g := admission.New(rdb, static(q), admission.WithPrefix(prefix))
		for range limit {
			if _, err := g.Admit(t.Context(), "b"); err != nil {
				t.Fatal(err)
			}
		}
		key := prefix + ":{b}:log"
		bytes := rdb.MemoryUsage(t.Context(), key).Val()
		per := float64(bytes) / float64(limit)
		t.Logf("limit=%d: MEMORY USAGE %d bytes, %.1f bytes per entry", limit, bytes, per)
		if limit <= 128 && per > 40 {
			t.Errorf("limit=%d: %.1f bytes per entry, want at most 40", limit, per)
		}
	}
}

// TestBusyTenantKeepsItsLog: a tenant admitted steadily for several
// windows keeps its log: after every admission the expiry is past its slot
// plus a window, and at most a window/8 beyond.
func TestBusyTenantKeepsItsLog(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	q := admission.Quota{Limit: 1000, Window: 200 * time.Millisecond}
	g := admission.New(rdb, static(q))
	ctx := t.Context()
	key := "admitq:{busy}:log"
	for end := time.Now().Add(3 * q.Window); time.Now().Before(end); time.Sleep(3 * time.Millisecond) {
		d, err := g.Admit(ctx, "busy")
		if err != nil || d.Outcome != admission.Admitted {
			t.Fatalf("Admit = %+v, %v; want admitted", d, err)
		}
		// The expiry, read as a time (PEXPIRETIME) so that a slow round
		// trip on a loaded machine cannot shrink it, must be past the slot
		// + window, and admit.lua moves it up to a window/8 further than it
		// must, so that it need not move it on every admission. (The
		// expiry is whole ms, rounded up.)
		ms, err := rdb.PExpireTime(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		expiry, need := time.Unix(0, int64(ms)), d.At.Add(q.Window)
		if expiry.Before(need) || expiry.After(need.Add(q.Window/8+5*time.Millisecond)) {
			t.Fatalf("expiry %v after the slot, want %v (by up to a window/8 more)", expiry.Sub(d.At), q.Window)
		}
	}
}

// TestIdleTenantExpires: a tenant's log outlives its newest slot by just
// over a window, then Redis drops it: no cleanup worker needed.
func TestIdleTenantExpires(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	q := admission.Quota{Limit: 1, Window: 200 * time.Millisecond, MaxDelay: time.Second}
	g := admission.New(rdb, static(q))
	ctx := t.Context()
	a, _ := g.Admit(ctx, "idle")
	b, err := g.Admit(ctx, "idle") // deferred one window ahead
	if err != nil || b.Outcome != admission.Deferred {
		t.Fatalf("second Admit = %+v, %v; want deferred", b, err)
	}
	key := "admitq:{idle}:log"
	ms, err := rdb.PExpireTime(ctx, key).Result() // a time: no round trip shrinks it
	if err != nil {
		t.Fatal(err)
	}
	if expiry, need := time.Unix(0, int64(ms)), b.At.Add(q.Window); expiry.Before(need) || expiry.After(need.Add(q.Window/8+5*time.Millisecond)) {
		t.Fatalf("expiry %v after a's decision, want just past newest slot + window = %v (by up to a window/8)", expiry.Sub(a.Now), need.Sub(a.Now))
	}
	deadline := time.Now().Add(2 * time.Second)
	for rdb.Exists(ctx, key).Val() == 1 {
		if time.Now().After(deadline) {
			t.Fatal("idle tenant's log still exists after 2s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if gone := time.Since(b.At); gone < q.Window-5*time.Millisecond {
		t.Fatalf("log expired %v after its newest slot, before the window %v passed", gone, q.Window)
	}
}

// TestLiveQuotaChange: a running gate sees a quota change made by another
// process within a second.
func TestLiveQuotaChange(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	operator := admission.NewRedisQuotas(srv.Client(t))
	if err := operator.Set(ctx, "live", admission.Quota{Limit: 1, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	g := admission.New(srv.Client(t), admission.NewRedisQuotas(srv.Client(t)))
	if d, _ := g.Admit(ctx, "live"); d.Outcome != admission.Admitted {
		t.Fatalf("first Admit = %v, want admitted", d.Outcome)
	}
	if d, _ := g.Admit(ctx, "live"); d.Outcome != admission.Rejected {
		t.Fatalf("second Admit = %v, want rejected", d.Outcome)
	}
	if err := operator.Set(ctx, "live", admission.Quota{Limit: 100, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	for {
		d, err := g.Admit(ctx, "live")
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome == admission.Admitted {
			break
		}
		if time.Since(changed) > time.Second {
			t.Fatal("gate still applies the old quota 1s after the change")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("quota change seen after %v", time.Since(changed).Round(time.Millisecond))
}

// TestBadInput: each bad input gets its sentinel and writes nothing.
func TestBadInput(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ok := admission.Quota{Limit: 1, Window: time.Second}
	good := admission.New(rdb, static(ok))
	store := admission.NewRedisQuotas(rdb)
	ctx := t.Context()
	tests := []struct {
		desc string
		call func() error
		want error
	}{
		{"empty tenant", func() error { _, err := good.Admit(ctx, ""); return err }, admission.ErrInvalidTenant},
		{"257-byte tenant", func() error { _, err := good.Admit(ctx, string(make([]byte, 257))); return err }, admission.ErrInvalidTenant},
		{"invalid UTF-8", func() error { _, err := good.Admit(ctx, "a\xffb"); return err }, admission.ErrInvalidTenant},
		{"control character", func() error { _, err := good.Admit(ctx, "a\nb"); return err }, admission.ErrInvalidTenant},
		{"tenant in a batch", func() error { _, err := good.AdmitBatch(ctx, "\x00", []string{"a"}); return err }, admission.ErrInvalidTenant},
		{"empty entry ID", func() error { _, err := good.AdmitID(ctx, "t", ""); return err }, admission.ErrInvalidID},
		{"usage of a bad tenant", func() error { _, err := good.Usage(ctx, ""); return err }, admission.ErrInvalidTenant},
		{"Limit 0", func() error {
			_, err := admission.New(rdb, static(admission.Quota{Window: time.Second})).Admit(ctx, "t")
			return err
		}, admission.ErrInvalidQuota},
		{"Window under 1ms", func() error {
			_, err := admission.New(rdb, static(admission.Quota{Limit: 1, Window: time.Microsecond})).Admit(ctx, "t")
			return err
		}, admission.ErrInvalidQuota},
		{"negative MaxDelay", func() error {
			_, err := admission.New(rdb, static(admission.Quota{Limit: 1, Window: time.Second, MaxDelay: -1})).Admit(ctx, "t")
			return err
		}, admission.ErrInvalidQuota},
		{"no quota", func() error { _, err := admission.New(rdb, admission.StaticQuotas{}).Admit(ctx, "t"); return err }, admission.ErrNoQuota},
		{"no quota in Redis", func() error { _, err := admission.New(rdb, store).Admit(ctx, "t"); return err }, admission.ErrNoQuota},
		{"set an invalid quota", func() error { return store.Set(ctx, "t", admission.Quota{Limit: -2, Window: time.Second}) }, admission.ErrInvalidQuota},
		{"set an invalid default", func() error { return store.SetDefault(ctx, admission.Quota{Limit: 1}) }, admission.ErrInvalidQuota},
		{"set a quota for a bad tenant", func() error { return store.Set(ctx, "", ok) }, admission.ErrInvalidTenant},
		{"get a missing quota", func() error { _, err := store.Get(ctx, "nobody"); return err }, admission.ErrNoQuota},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			err := tc.call()
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if n := rdb.DBSize(ctx).Val(); n != 0 {
				keys, _ := rdb.Keys(ctx, "*").Result()
				t.Fatalf("DBSIZE = %d (%v), want 0", n, keys)
			}
		})
	}
}

// TestUsage reports the window, the reservations and the next free slot.
func TestUsage(t *testing.T) {
	srv := redistest.Start(t)
	q := admission.Quota{Limit: 2, Window: time.Minute, MaxDelay: 5 * time.Minute}
	g := admission.New(srv.Client(t), static(q))
	ctx := t.Context()
	ds, err := g.AdmitBatch(ctx, "u", []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	u, err := g.Usage(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	if u.InWindow != 2 || u.Reserved != 1 || u.Quota != q {
		t.Fatalf("Usage = %+v, want 2 in the window, 1 reserved", u)
	}
	if want := ds[1].At.Add(q.Window); !u.NextFree.Equal(want) {
		t.Fatalf("NextFree = %v, want the second slot + window = %v", u.NextFree, want)
	}
}

// TestRelease gives a slot back: the next request takes it.
func TestRelease(t *testing.T) {
	srv := redistest.Start(t)
	q := admission.Quota{Limit: 1, Window: time.Minute}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			g := admission.New(srv.Client(t), static(q), append([]admission.Option{admission.WithPrefix("rel-" + v.name)}, v.opts...)...)
			ctx := t.Context()
			d, _ := g.Admit(ctx, "r")
			if r, _ := g.Admit(ctx, "r"); r.Outcome != admission.Rejected {
				t.Fatalf("second Admit = %v, want rejected", r.Outcome)
			}
			if err := g.Release(ctx, d); err != nil {
				t.Fatal(err)
			}
			if r, _ := g.Admit(ctx, "r"); r.Outcome != admission.Admitted {
				t.Fatalf("Admit after Release = %v, want admitted", r.Outcome)
			}
		})
	}
}
