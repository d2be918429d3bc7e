package admission

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The FailOpen fallback (fallback.go), on a fake clock.

func newTestLimiter(instances int) (*localLimiter, *fakeClock) {
	// On a bucket boundary, so that the tests can say which bucket is
	// which.
	c := &fakeClock{t: time.Unix(1_780_000_000, 0)}
	l := newLocalLimiter(instances)
	l.clock = c.now
	return l, c
}

func outcomes(ds []Decision) string {
	var b []byte
	for _, d := range ds {
		b = append(b, d.Outcome.String()[0])
	}
	return string(b)
}

// TestLocalLimiter: the fallback admits Limit/instances per window per
// tenant, rejects the rest (never defers), marks every decision Local,
// and frees room one bucket (a tenth of the window) after the window has
// passed at the latest.
func TestLocalLimiter(t *testing.T) {
	q := Quota{Limit: 12, Window: time.Second, MaxDelay: time.Hour}
	l, clk := newTestLimiter(4) // 3 per window each
	ids := []string{"a", "b", "c", "d", "e"}

	start := clk.now()
	ds := l.admit("t", q, ids, start)
	if got := outcomes(ds); got != "aaarr" {
		t.Fatalf("outcomes = %s, want aaarr: Limit/instances = 3 admitted, never deferred", got)
	}
	frees := start.Add(q.Window + q.Window/localBuckets)
	for i, d := range ds {
		if !d.Local || d.Tenant != "t" {
			t.Fatalf("decision %d = %+v, want Local for tenant t", i, d)
		}
		switch d.Outcome {
		case Admitted:
			if d.ID != ids[i] || !d.At.Equal(d.Now) || d.Remaining != 2-i {
				t.Fatalf("admission %d = %+v, want ID %q, At = Now, Remaining %d", i, d, ids[i], 2-i)
			}
		case Rejected:
			if d.ID != "" || !d.At.Equal(frees) {
				t.Fatalf("rejection %d = %+v, want no ID and At %v: when the admissions' bucket stops counting", i, d, frees)
			}
		}
	}
	if got := outcomes(l.admit("u", q, ids[:1], clk.now())); got != "a" {
		t.Fatalf("another tenant: %s, want its own window", got)
	}
	clk.add(q.Window) // a window later: the first bucket still counts, whole
	if got := outcomes(l.admit("t", q, ids[:1], clk.now())); got != "r" {
		t.Fatalf("a window later: %s, want r", got)
	}
	clk.add(q.Window/localBuckets - time.Nanosecond)
	if got := outcomes(l.admit("t", q, ids[:1], clk.now())); got != "r" {
		t.Fatalf("just before the bucket leaves: %s, want r", got)
	}
	clk.add(time.Nanosecond) // = frees
	if got := outcomes(l.admit("t", q, ids, clk.now())); got != "aaarr" {
		t.Fatalf("at %v: %s, want aaarr", frees, got)
	}

	one, clk1 := newTestLimiter(100)
	if got := outcomes(one.admit("t", q, ids, clk1.now())); got != "arrrr" {
		t.Fatalf("more instances than Limit: %s, want one admission per window, not none", got)
	}
}

// TestLocalLimiterBound: at any pace, no window of the quota's length ever
// holds more than the local limit, the property the README states. A
// tenant admitted at every step of 7ms with a limit of 5 per 100ms.
func TestLocalLimiterBound(t *testing.T) {
	q := Quota{Limit: 5, Window: 100 * time.Millisecond}
	l, clk := newTestLimiter(1)
	var at []time.Time
	for range 2000 {
		if d := l.admit("t", q, []string{"x"}, clk.now())[0]; d.Outcome == Admitted {
			at = append(at, d.At)
		}
		clk.add(7 * time.Millisecond)
	}
	for i := range at {
		n := 0
		for j := i; j < len(at) && at[j].Before(at[i].Add(q.Window)); j++ {
			n++
		}
		if n > q.Limit {
			t.Fatalf("%d admissions in the window from %v, limit %d", n, at[i], q.Limit)
		}
	}
	// And it is not far below: at least Limit per window plus a bucket.
	if per := float64(len(at)) / (2000 * 7e-3 / (1.1 * q.Window.Seconds())); per < float64(q.Limit)-1 {
		t.Fatalf("%.1f admissions per 110ms, want about %d", per, q.Limit)
	}
}

// TestLocalLimiterRecordsDecisionTime: a caller that waited out a Redis
// timeout passes the time it began; the admission is counted when it is
// made, so it cannot leave the window early.
func TestLocalLimiterRecordsDecisionTime(t *testing.T) {
	q := Quota{Limit: 1, Window: time.Second}
	l, clk := newTestLimiter(1)
	began := clk.now()
	clk.add(900 * time.Millisecond) // the Redis call timed out meanwhile
	d := l.admit("t", q, []string{"late"}, began)[0]
	if d.Outcome != Admitted || !d.At.Equal(clk.now()) {
		t.Fatalf("decision = %+v, want admitted at the clock's time %v, not when the call began", d, clk.now())
	}
	clk.add(200 * time.Millisecond) // 1.1s after began, 0.2s after the admission
	if d := l.admit("t", q, []string{"next"}, clk.now())[0]; d.Outcome != Rejected {
		t.Fatalf("second admission 200ms after the first = %v, want rejected", d.Outcome)
	}
	// The clock stepping back counts as of the newest bucket.
	if d := l.admit("t", q, []string{"behind"}, began)[0]; d.Outcome != Rejected {
		t.Fatalf("decision with the clock behind = %+v, want rejected", d)
	}
}

// TestLocalLimiterWindowChange: a quota whose window changes keeps what was
// counted, for a whole new window.
func TestLocalLimiterWindowChange(t *testing.T) {
	l, clk := newTestLimiter(1)
	long := Quota{Limit: 2, Window: time.Hour}
	short := Quota{Limit: 2, Window: time.Second}
	if got := outcomes(l.admit("t", long, []string{"a", "b"}, clk.now())); got != "aa" {
		t.Fatal(got)
	}
	if got := outcomes(l.admit("t", short, []string{"c"}, clk.now())); got != "r" {
		t.Fatalf("window shrunk: %s, want r: the two admissions still count", got)
	}
	clk.add(short.Window + short.Window/localBuckets)
	if got := outcomes(l.admit("t", short, []string{"c", "d", "e"}, clk.now())); got != "aar" {
		t.Fatalf("a short window later: %s, want aar", got)
	}
}

// TestLocalLimiterMemory: memory per tenant is constant, however many
// admissions: 3,000,000 local admissions for one tenant used to hold
// 72 MiB of timestamps; 1,000,000 here would have held 24 MiB.
func TestLocalLimiterMemory(t *testing.T) {
	l, clk := newTestLimiter(1)
	q := Quota{Limit: 10_000_000, Window: time.Hour}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	for range 1000 {
		l.admit("t", q, ids, clk.now())
		clk.add(time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := l.admit("t", q, ids[:1], clk.now())[0].Remaining; got != q.Limit-1_000_001 {
		t.Fatalf("Remaining = %d, want %d", got, q.Limit-1_000_001)
	}
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("1,000,000 local admissions for one tenant: heap grew %d bytes", grew)
	if grew > 1<<20 { // the log of timestamps held 24 MiB; a megabyte leaves room for other tests' garbage
		t.Fatalf("heap grew %d bytes for one tenant's 1,000,000 admissions, want a constant", grew)
	}

	// Per tenant: 10,000 tenants.
	l2, clk2 := newTestLimiter(1)
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 10_000 {
		l2.admit(fmt.Sprintf("tenant-%05d", i), q, ids[:3], clk2.now())
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / 10_000
	t.Logf("%d bytes per tenant (names of 12 bytes)", per)
	if per > localTenantBytes {
		t.Fatalf("%d bytes per tenant, the README states %d at most", per, localTenantBytes)
	}
	runtime.KeepAlive(l)
	runtime.KeepAlive(l2)
}

// TestLocalLimiterEviction: past maxTenants, the least recently admitted
// idle tenant goes first, then one only observed on Redis; a tenant with
// fallback admissions in its window is never evicted, so its bound holds,
// and a new tenant is rejected instead until one frees.
func TestLocalLimiterEviction(t *testing.T) {
	l, clk := newTestLimiter(1)
	l.maxTenants = localShards // one a shard
	short := Quota{Limit: 2, Window: 100 * time.Millisecond}
	long := Quota{Limit: 2, Window: time.Hour}
	// Tenants that share a shard.
	var same []string
	want := l.shard("t0")
	for i := 0; len(same) < 3; i++ {
		if tenant := "t" + strconv.Itoa(i); l.shard(tenant) == want {
			same = append(same, tenant)
		}
	}
	a, b, c := same[0], same[1], same[2]

	l.admit(a, short, []string{"x"}, clk.now())
	clk.add(time.Second) // a is idle
	if got := outcomes(l.admit(b, long, []string{"x", "y", "z"}, clk.now())); got != "aar" {
		t.Fatalf("b: %s, want aar", got)
	}
	if _, ok := want.m[a]; ok {
		t.Fatal("idle tenant a not evicted for b")
	}
	// b is active with fallback admissions: c cannot be tracked, and is
	// rejected until b frees, rather than b forgetting its count.
	d := l.admit(c, long, []string{"x"}, clk.now())[0]
	if d.Outcome != Rejected || !d.Local || d.At.Before(clk.now().Add(long.Window)) {
		t.Fatalf("c beyond the cap = %+v, want rejected until b's window passes", d)
	}
	if got := outcomes(l.admit(b, long, []string{"x"}, clk.now())); got != "r" {
		t.Fatalf("b after c's attempt: %s, want r: its count kept", got)
	}

	// A tenant only observed on Redis gives way to the fallback.
	l2, clk2 := newTestLimiter(1)
	l2.maxTenants = localShards
	l2.seed = l.seed // a and b share a shard
	s := l2.shard(a)
	l2.observe(a, long, []Decision{{Tenant: a, Outcome: Admitted, Now: clk2.now(), At: clk2.now()}}, clk2.now())
	if got := outcomes(l2.admit(b, long, []string{"x"}, clk2.now())); got != "a" {
		t.Fatalf("b: %s, want a", got)
	}
	if _, ok := s.m[a]; ok || s.m[b] == nil {
		t.Fatalf("observed tenant a kept, b tracked: %v", s.m[b] != nil)
	}
}

// TestLocalLimiterBeyondCap: 12,000 tenants active at once against a cap
// of 10,000, each asking 5 times its limit within one window. No tenant
// goes over its limit: the old fallback evicted active tenants at random,
// resetting their counts, and 11,225 of 12,000 went over. Past the cap the
// tenants not tracked are rejected instead.
func TestLocalLimiterBeyondCap(t *testing.T) {
	l, clk := newTestLimiter(1)
	l.maxTenants = 10_000
	q := Quota{Limit: 3, Window: time.Minute}
	admitted := make([]int, 12_000)
	for range 5 * q.Limit {
		for i := range admitted {
			if d := l.admit("tenant-"+strconv.Itoa(i), q, []string{"x"}, clk.now())[0]; d.Outcome == Admitted {
				admitted[i]++
			}
		}
		clk.add(time.Millisecond)
	}
	over, served := 0, 0
	for _, n := range admitted {
		if n > q.Limit {
			over++
		}
		if n > 0 {
			served++
		}
	}
	if over != 0 {
		t.Fatalf("%d of 12,000 tenants went over their limit", over)
	}
	if n := l.tracked(); n > l.maxTenants || served < l.maxTenants*9/10 {
		t.Fatalf("%d tenants tracked (cap %d), %d admitted anything; want the cap nearly full and served", n, l.maxTenants, served)
	}
	t.Logf("12,000 tenants, cap 10,000: %d admitted, none over its limit", served)
}

// TestLocalLimiterObserve: what this producer took from Redis counts
// against its fallback share, and a window Redis said was full stays full
// in the fallback until Redis said it would free.
func TestLocalLimiterObserve(t *testing.T) {
	q := Quota{Limit: 6, Window: time.Second, MaxDelay: time.Minute}
	l, clk := newTestLimiter(2) // 3 each
	now := clk.now()
	redisNow := now.Add(-time.Hour) // Redis's clock need not match ours
	admitted := func(remaining int) Decision {
		return Decision{Outcome: Admitted, Now: redisNow, At: redisNow, Remaining: remaining}
	}
	l.observe("t", q, []Decision{admitted(5), admitted(4)}, now)
	if got := outcomes(l.admit("t", q, []string{"a", "b"}, now)); got != "ar" {
		t.Fatalf("after 2 admissions on Redis: %s, want ar (share 3)", got)
	}
	// Other producers filled the window on Redis: this one had 1 of the 6,
	// but its share of what is left is nothing, for a window.
	l.observe("s", q, []Decision{admitted(0)}, now)
	if got := outcomes(l.admit("s", q, []string{"a"}, now)); got != "r" {
		t.Fatalf("after Redis said the window was full: %s, want r", got)
	}
	// Half used: a share of 3 - ceil(3/2) = 1 more.
	l.observe("h", q, []Decision{admitted(3)}, now)
	if got := outcomes(l.admit("h", q, []string{"a", "b"}, now)); got != "ar" {
		t.Fatalf("after Redis said the window was half full: %s, want ar", got)
	}
	clk.add(q.Window)
	if got := outcomes(l.admit("s", q, []string{"a", "b", "c"}, clk.now())); got != "aar" {
		t.Fatalf("a window later: %s, want aar (its own Redis admission still counted a bucket longer)", got)
	}
	now = clk.now()
	// A retried ID's slot (Existing) was counted when it was taken: only
	// the tenant's use (1 of 6, a share of 1) counts.
	l.observe("u", q, []Decision{{Outcome: Admitted, Existing: true, Now: redisNow, At: redisNow, Remaining: 5}}, now)
	if got := outcomes(l.admit("u", q, []string{"a", "b", "c"}, now)); got != "aar" {
		t.Fatalf("after an Existing admission: %s, want aar", got)
	}
	if c := l.shard("u").m["u"]; c.sum() != 2 {
		t.Fatalf("own count %d after an Existing admission and 2 local ones, want 2", c.sum())
	}
	// Deferred 5s ahead on Redis: full until then, in local time.
	l.observe("v", q, []Decision{{Outcome: Deferred, Now: redisNow, At: redisNow.Add(5 * time.Second)}}, now)
	d := l.admit("v", q, []string{"a"}, now)[0]
	if d.Outcome != Rejected || !d.At.Equal(now.Add(5*time.Second)) {
		t.Fatalf("after a deferral = %+v, want rejected until %v", d, now.Add(5*time.Second))
	}
	clk.add(5 * time.Second)
	if got := outcomes(l.admit("v", q, []string{"a"}, clk.now())); got != "r" {
		t.Fatalf("after the deferred slot: %s, want r: the slots before it leave the window only a window later", got)
	}
	clk.add(q.Window)
	if got := outcomes(l.admit("v", q, []string{"a"}, clk.now())); got != "a" {
		t.Fatalf("a window after the deferred slot: %s, want a", got)
	}
	// Rejected with At = next free slot - MaxDelay.
	now = clk.now()
	l.observe("w", q, []Decision{{Outcome: Rejected, Now: now, At: now.Add(time.Second)}}, now)
	if d := l.admit("w", q, []string{"a"}, now)[0]; d.Outcome != Rejected || !d.At.Equal(now.Add(time.Second+q.MaxDelay)) {
		t.Fatalf("after a rejection = %+v, want rejected until the next free slot", d)
	}
}

// TestLocalLimiterGuard: back on Redis, a tenant's fallback admissions
// still count until they leave the window, and a window more, since Redis
// never saw them: the producer sends Redis only what its share has room
// for, and owes Redis the fallback admissions still in the window until
// it has replayed them.
func TestLocalLimiterGuard(t *testing.T) {
	q := Quota{Limit: 6, Window: time.Second}
	l, clk := newTestLimiter(2) // 3 each
	if n, _, debt := l.guard("t", q, 5, clk.now()); n != 5 || debt != 0 {
		t.Fatalf("no outage: guard = %d, debt %d; want all 5, no debt", n, debt)
	}
	l.admit("t", q, []string{"a", "b"}, clk.now())
	if n, _, debt := l.guard("t", q, 1, clk.now()); n != 1 || debt != 2 {
		t.Fatalf("guard = %d, debt %d; want 1 (the share has room), debt 2", n, debt)
	}
	l.replayed("t", 2)
	redis := Decision{Outcome: Admitted, Now: clk.now(), At: clk.now(), Remaining: 3}
	l.observe("t", q, []Decision{redis}, clk.now())
	n, at, debt := l.guard("t", q, 1, clk.now())
	if frees := clk.now().Add(q.Window + q.Window/localBuckets); n != 0 || !at.Equal(frees) || debt != 0 {
		t.Fatalf("guard = %d, %v, debt %d; want 0 until %v, no debt once replayed", n, at, debt, frees)
	}
	clk.add(q.Window + q.Window/localBuckets)
	if n, _, _ := l.guard("t", q, 100, clk.now()); n != 3 {
		t.Fatalf("once the local admissions have left the window: guard lets %d of 100 through, want the share, 3", n)
	}
	clk.add(q.Window)
	if n, _, _ := l.guard("t", q, 100, clk.now()); n != 100 {
		t.Fatalf("two windows after the last local admission: guard lets %d of 100 through, want all", n)
	}
	// A debt not replayed lapses with its window.
	l.admit("u", q, []string{"a"}, clk.now())
	clk.add(q.Window + q.Window/localBuckets)
	if _, _, debt := l.guard("u", q, 1, clk.now()); debt != 0 {
		t.Fatalf("a window later: debt %d, want 0", debt)
	}
}

// TestLocalLimiterConcurrent: many tenants from many goroutines, under
// -race, with the cap far below the tenants: it stays bounded.
func TestLocalLimiterConcurrent(t *testing.T) {
	l := newLocalLimiter(1)
	l.maxTenants = 1000
	q := Quota{Limit: 3, Window: 10 * time.Millisecond}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 5000 {
				tenant := strconv.Itoa((w*5000 + i) % 3000)
				if i%3 == 0 {
					l.observe(tenant, q, []Decision{{Outcome: Admitted, Now: time.Now(), At: time.Now()}}, time.Now())
				} else {
					l.admit(tenant, q, []string{"x"}, time.Now())
				}
				l.guard(tenant, q, 1, time.Now())
				l.replayed(tenant, 1)
			}
		})
	}
	wg.Wait()
	if n := l.tracked(); n > l.maxTenants {
		t.Fatalf("%d tenants tracked, cap %d", n, l.maxTenants)
	}
}

// BenchmarkLocalLimiter: fallback decisions over many tenants, beyond the
// cap included; each new tenant costs O(1), never a scan of the others.
func BenchmarkLocalLimiter(b *testing.B) {
	q := Quota{Limit: 100, Window: time.Second}
	for _, tenants := range []int{1000, 12_000, 200_000} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			l := newLocalLimiter(1)
			l.maxTenants = 10_000
			names := make([]string, tenants)
			for i := range names {
				names[i] = "tenant-" + strconv.Itoa(i)
			}
			ids := []string{"x"}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					l.admit(names[i%tenants], q, ids, time.Now())
					i += 7
				}
			})
		})
	}
}
