//go:build unix

package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/lua"
)

// Chaos tests: real redis-server processes that the test kills and
// restarts, or freezes with SIGSTOP, while gates are flooded.

const (
	floodWorkers = 64 // goroutines per gate
	floodTenants = 8
	// outageFor is how long Redis stays away: long enough for the breaker
	// to open (breakerWaves timeouts) and for a few fallback windows to
	// pass after.
	outageFor = 1500 * time.Millisecond
	// latencyMargin is what a call may take beyond the gate's timeout: the
	// scheduling of hundreds of goroutines under -race on a machine that
	// other work keeps busy. Small enough still to catch a call that waits
	// on the connection, for go-redis' ReadTimeout (5s) or the outage.
	latencyMargin = 250 * time.Millisecond
	// breakerWaves is how many timeouts in a row each of a flood's
	// callers pays before the breaker opens: its threshold, 3 failures
	// that do not overlap.
	breakerWaves = 3
	// recoverWithin is the promise: back on Redis within 1 s of
	// Redis answering again.
	recoverWithin = time.Second
	// goRedisRedial is how often a go-redis pool dials once PoolSize dials
	// in a row have failed: until its background dial succeeds, the pool
	// fails every call at once without dialling (go-redis v9
	// internal/pool/pool.go, tryDial). After refused connections, the gate
	// can be back on Redis no sooner than that dial, plus up to one breaker
	// probe interval (200ms).
	goRedisRedial = time.Second
)

// outage is how a test takes Redis away and gives it back.
type outage struct {
	name  string
	begin func(*redistest.Server)
	end   func(*redistest.Server)
	// recover bounds the time from end returning to the first decision
	// from Redis.
	recover time.Duration
}

var (
	// Refused: the process is gone and comes back empty, so the scripts
	// must be loaded again (NOSCRIPT).
	killed = outage{"killed", (*redistest.Server).Kill, (*redistest.Server).Restart,
		goRedisRedial + 200*time.Millisecond + latencyMargin}
	// Black hole: the process is frozen; connections are accepted into the
	// listen backlog and every reply hangs, so only deadlines help.
	frozen = outage{"frozen", (*redistest.Server).Pause, (*redistest.Server).Resume, recoverWithin}
)

// Phases of a chaos run. A call counts in every phase it overlaps.
const (
	phaseUp int32 = iota
	phaseDown
	phaseBack
)

var phaseNames = [...]string{"before", "during", "after"}

// floodStats is what a flood saw; each worker keeps its own and they are
// merged at the end.
type floodStats struct {
	calls       [3]int
	maxLatency  [3]time.Duration
	outage      []timedCall // the calls that overlapped the outage
	unavailable int         // errors wrapping ErrUnavailable
	otherErrs   []error
	local       []admission.Decision // Local decisions during the outage
}

func (s *floodStats) merge(o *floodStats) {
	for p := range s.calls {
		s.calls[p] += o.calls[p]
		s.maxLatency[p] = max(s.maxLatency[p], o.maxLatency[p])
	}
	s.outage = append(s.outage, o.outage...)
	s.unavailable += o.unavailable
	s.otherErrs = append(s.otherErrs, o.otherErrs...)
	s.local = append(s.local, o.local...)
}

// timedCall is when a call ended and how long it took.
type timedCall struct {
	end time.Time
	lat time.Duration
}

// flood drives one gate from floodWorkers goroutines and times every call.
type flood struct {
	name    string
	g       *admission.Gate
	rdb     *redis.Client
	q       admission.Quota
	policy  admission.FailurePolicy
	timeout time.Duration
	phase   *atomic.Int32 // shared by the floods of one outage

	remote atomic.Int64 // decisions from Redis so far
	// firstBack is when (UnixNano) a call begun after Redis came back
	// first got a decision from Redis: not Local, no error.
	firstBack atomic.Int64

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	stats  floodStats
}

func (f *flood) start() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	for w := range floodWorkers {
		f.wg.Go(func() { f.work(ctx, w) })
	}
}

func (f *flood) work(ctx context.Context, w int) {
	var st floodStats
	defer func() {
		f.mu.Lock()
		f.stats.merge(&st)
		f.mu.Unlock()
	}()
	for i := 0; ctx.Err() == nil; i++ {
		tenant := "chaos" + strconv.Itoa((w+i)%floodTenants)
		p0 := f.phase.Load()
		start := time.Now()
		d, err := f.g.Admit(ctx, tenant)
		lat := time.Since(start)
		p1 := f.phase.Load()
		if ctx.Err() != nil {
			return // the flood is over; this call was cut short by it
		}
		for p := p0; p <= p1; p++ {
			st.calls[p]++
			st.maxLatency[p] = max(st.maxLatency[p], lat)
			if p == phaseDown {
				st.outage = append(st.outage, timedCall{end: start.Add(lat), lat: lat})
			}
		}
		switch {
		case errors.Is(err, admission.ErrUnavailable):
			st.unavailable++
		case err != nil:
			st.otherErrs = append(st.otherErrs, err)
		case d.Local:
			if p0 <= phaseDown && p1 >= phaseDown {
				st.local = append(st.local, d)
			}
		default:
			f.remote.Add(1)
			if p0 == phaseBack {
				f.firstBack.CompareAndSwap(0, time.Now().UnixNano())
			}
		}
		if err != nil || d.Local {
			// Answers without Redis take microseconds; don't let hundreds
			// of goroutines spin two shared cores flat out, which under
			// -race starves the very timers the test measures.
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// stop ends the flood and returns what it saw.
func (f *flood) stop() floodStats {
	f.cancel()
	f.wg.Wait()
	return f.stats
}

// waitFor polls cond every millisecond until it holds, or fails the test
// after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(time.Millisecond)
	}
}

// chaosGate describes one gate of a chaos run.
type chaosGate struct {
	policy  admission.FailurePolicy
	variant string
	opts    []admission.Option
}

const chaosInstances = 4

// runChaos floods one gate per gs on srv, takes Redis away for outageFor as
// o says, gives it back, and checks what the issue promises: no call takes
// longer than the timeout and a margin; FailClosed errors wrap
// ErrUnavailable, FailOpen decides locally, admitting at most
// Limit/instances per window; the breaker spares callers the timeout once
// open; the gate is back on Redis within o.recover; nothing leaks once the
// gates and clients are closed.
func runChaos(t *testing.T, srv *redistest.Server, o outage, gs []chaosGate) {
	ignore := goleak.IgnoreCurrent()
	q := admission.Quota{Limit: 40, Window: 200 * time.Millisecond}
	var phase atomic.Int32
	floods := make([]*flood, len(gs))
	for i, cg := range gs {
		// Ordinary clients: ContextTimeoutEnabled off, so go-redis waits
		// for a reply past any context deadline, and only the gate bounds
		// a call.
		rdb := redis.NewClient(srv.Options())
		name := fmt.Sprintf("%v/%s", cg.policy, cg.variant)
		g := admission.New(rdb, static(q), append([]admission.Option{
			admission.WithFailurePolicy(cg.policy),
			admission.WithInstances(chaosInstances),
			admission.WithPrefix("chaos-" + o.name + "-" + name),
		}, cg.opts...)...)
		floods[i] = &flood{name: name, g: g, rdb: rdb, q: q, policy: cg.policy, timeout: admission.DefaultTimeout, phase: &phase}
	}
	stopped := false
	stopAll := func() {
		if stopped {
			return
		}
		stopped = true
		for _, f := range floods {
			f.stop()
			f.g.Close()
			f.rdb.Close()
		}
	}
	t.Cleanup(func() {
		o.end(srv) // should the test fail during the outage
		stopAll()
	})

	lag := startLagMeter()
	for _, f := range floods {
		f.start()
	}
	for _, f := range floods {
		waitFor(t, 5*time.Second, f.name+": decisions from Redis before the outage", func() bool { return f.remote.Load() >= 50 })
	}

	o.begin(srv)
	down := time.Now()
	phase.Store(phaseDown)
	time.Sleep(outageFor) // the outage itself
	phase.Store(phaseBack)
	o.end(srv)
	back := time.Now()
	for _, f := range floods {
		waitFor(t, 5*time.Second, f.name+": a decision from Redis after it came back", func() bool { return f.firstBack.Load() != 0 })
	}
	stats := make([]floodStats, len(floods))
	for i, f := range floods {
		stats[i] = f.stop()
	}
	stall := lag.stop()
	stopAll()
	redistest.VerifyNoLeaks(t, ignore)

	for i, f := range floods {
		checkFlood(t, f, stats[i], down, back, o.recover, stall)
	}
}

// lagMeter measures how late the Go scheduler runs a goroutine whose
// timer has fired: on a machine that other work keeps busy, under -race,
// that lag comes on top of every timeout the gate keeps, and no gate can
// do better. The chaos checks allow for it, besides latencyMargin, so
// that they still tell a call bounded by the gate's timeout from one that
// waits on the connection or the outage, however busy the machine.
type lagMeter struct {
	stopc chan struct{}
	done  chan time.Duration
}

func startLagMeter() *lagMeter {
	m := &lagMeter{stopc: make(chan struct{}), done: make(chan time.Duration, lagSleepers)}
	// Several sleepers, as the worst lag of one is not the worst that any
	// of hundreds of runnable goroutines sees.
	for range lagSleepers {
		go func() {
			var worst time.Duration
			for {
				select {
				case <-m.stopc:
					m.done <- worst
					return
				default:
				}
				start := time.Now()
				time.Sleep(time.Millisecond)
				worst = max(worst, time.Since(start)-time.Millisecond)
			}
		}()
	}
	return m
}

const lagSleepers = 8

// stop ends the measurement and returns the worst lag seen.
func (m *lagMeter) stop() time.Duration {
	close(m.stopc)
	var worst time.Duration
	for range lagSleepers {
		worst = max(worst, <-m.done)
	}
	return worst
}

// checkFlood checks what one flood saw of an outage from down to back.
// stall is the worst scheduler lag seen during the run (lagMeter).
func checkFlood(t *testing.T, f *flood, st floodStats, down, back time.Time, recoverWithin, stall time.Duration) {
	t.Helper()
	recovery := time.Unix(0, f.firstBack.Load()).Sub(back)
	margin := latencyMargin + stall
	// A call that took half the timeout, beyond what the scheduler lost,
	// paid the timeout rather than the breaker's answer.
	slow, lastSlow := 0, time.Time{}
	for _, c := range st.outage {
		if c.lat >= f.timeout/2+stall {
			slow++
			if c.end.After(lastSlow) {
				lastSlow = c.end
			}
		}
	}
	t.Logf("%s: %d calls during the outage, worst %v, %d took over %v, the last %v into it; %d ErrUnavailable, %d local decisions; back on Redis %v after it answered; scheduler lag up to %v",
		f.name, st.calls[phaseDown], st.maxLatency[phaseDown].Round(time.Millisecond), slow, f.timeout/2+stall,
		lastSlow.Sub(down).Round(time.Millisecond), st.unavailable, len(st.local), recovery.Round(time.Millisecond),
		stall.Round(time.Millisecond))

	for i, err := range st.otherErrs {
		if i == 3 {
			t.Errorf("%s: … %d errors in all", f.name, len(st.otherErrs))
			break
		}
		t.Errorf("%s: error not wrapping ErrUnavailable: %v", f.name, err)
	}
	var late []string
	for p, name := range phaseNames {
		if st.maxLatency[p] > f.timeout+margin {
			late = append(late, name)
		}
	}
	if late != nil {
		t.Errorf("%s: a call %s the outage took %v, more than the timeout %v + %v",
			f.name, strings.Join(late, ", "), st.maxLatency[phaseDown], f.timeout, margin)
	}
	// The breaker: only calls made before it opened pay the timeout, not
	// every call. It counts the failures of overlapping calls as one, so
	// a flood pays in breakerWaves waves of floodWorkers calls.
	if slow > (breakerWaves+1)*floodWorkers {
		t.Errorf("%s: %d of %d calls during the outage took over %v: the breaker does not spare callers the timeout",
			f.name, slow, st.calls[phaseDown], f.timeout/2+stall)
	}
	// Each wave's timeout can be late by the scheduler's lag.
	if open := lastSlow.Sub(down); slow > 0 && open > breakerWaves*(f.timeout+stall)+2*latencyMargin {
		t.Errorf("%s: calls paid the timeout until %v into the outage, want the breaker open after %d timeouts",
			f.name, open, breakerWaves)
	}
	if recovery > recoverWithin+stall {
		t.Errorf("%s: back on Redis %v after it answered, want within %v + %v", f.name, recovery, recoverWithin, stall)
	}
	switch f.policy {
	case admission.FailClosed:
		// Local rejections may come from the deny cache, which holds
		// whatever Redis said; nothing may be admitted without Redis.
		if n := len(slotsOf(st.local)); n != 0 {
			t.Errorf("%s: %d local admissions", f.name, n)
		}
		if st.unavailable == 0 {
			t.Errorf("%s: no ErrUnavailable during the outage", f.name)
		}
	case admission.FailOpen:
		if st.unavailable != 0 {
			t.Errorf("%s: ErrUnavailable %d times", f.name, st.unavailable)
		}
		checkLocal(t, f.name, st.local, f.q, chaosInstances)
	}
}

// checkLocal checks the fallback's decisions: admitted or rejected, never
// deferred, and per tenant no more than Limit/instances admitted in any
// window.
func checkLocal(t *testing.T, name string, ds []admission.Decision, q admission.Quota, instances int) {
	t.Helper()
	byTenant := map[string][]admission.Decision{}
	for _, d := range ds {
		if d.Outcome == admission.Deferred {
			t.Errorf("%s: local decision deferred: %+v", name, d)
		}
		byTenant[d.Tenant] = append(byTenant[d.Tenant], d)
	}
	if len(byTenant) != floodTenants {
		t.Errorf("%s: local decisions for %d tenants, want all %d", name, len(byTenant), floodTenants)
	}
	share := admission.Quota{Limit: q.Limit / instances, Window: q.Window}
	for tenant, ds := range byTenant {
		slots := slotsOf(ds)
		if len(slots) == 0 {
			t.Errorf("%s: tenant %s: no local admissions during the outage", name, tenant)
		}
		checkBound(t, name+": local admissions of "+tenant, slots, share)
	}
}

// chaosGates are the gates flooded together through each outage: both
// policies, batched (group commit and deny cache) and not.
func chaosGates() []chaosGate {
	var gs []chaosGate
	for _, p := range []admission.FailurePolicy{admission.FailClosed, admission.FailOpen} {
		for _, v := range variants {
			gs = append(gs, chaosGate{policy: p, variant: v.name, opts: v.opts})
		}
	}
	return gs
}

// TestChaosKilled: Redis is killed during a flood and restarted empty.
// Connections are refused, so calls fail fast; after the restart the
// scripts are gone and must be loaded again, batched (commit.go retries
// with EVAL) and not (redis.Script.Run falls back to EVAL).
func TestChaosKilled(t *testing.T) {
	runChaos(t, redistest.Start(t), killed, chaosGates())
}

// TestChaosFrozen: Redis is frozen with SIGSTOP during a flood: every
// connection hangs rather than fails, which is where the timeout and the
// breaker matter.
func TestChaosFrozen(t *testing.T) {
	runChaos(t, redistest.Start(t), frozen, chaosGates())
}

// TestChaosFrozenDirectCall: with batching off, a call to a frozen Redis
// returns within the gate's timeout on an ordinary go-redis client too,
// one without ContextTimeoutEnabled, which waits for a reply past any
// context deadline.
func TestChaosFrozenDirectCall(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t) // default options: ContextTimeoutEnabled off
	for _, policy := range []admission.FailurePolicy{admission.FailClosed, admission.FailOpen} {
		g := admission.New(rdb, static(admission.Quota{Limit: 10, Window: time.Second}),
			admission.WithBatching(false), admission.WithFailurePolicy(policy))
		t.Cleanup(func() { g.Close() })
		if _, err := g.Admit(t.Context(), "direct"); err != nil {
			t.Fatal(err)
		}
		srv.Pause()
		start := time.Now()
		d, err := g.Admit(t.Context(), "direct")
		took := time.Since(start)
		srv.Resume()
		if took > admission.DefaultTimeout+latencyMargin {
			t.Errorf("%v: Admit on a frozen Redis took %v (%+v, %v), want at most the timeout %v + %v",
				policy, took, d, err, admission.DefaultTimeout, latencyMargin)
		}
	}
}

// TestChaosRestartEmpty: after Redis restarts empty, or loses its script
// cache, the gate goes on without a restart of the process: NOSCRIPT is
// handled, the scripts are cached again, and the logs start afresh.
func TestChaosRestartEmpty(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	q := admission.Quota{Limit: 2, Window: time.Minute}
	sha := lua.Admit().Hash()
	for _, v := range variants {
		for _, how := range []string{"script flush", "restart"} {
			t.Run(v.name+"/"+how, func(t *testing.T) {
				g := admission.New(srv.Client(t), static(q), append([]admission.Option{admission.WithPrefix("empty-" + v.name + "-" + strings.ReplaceAll(how, " ", "-"))}, v.opts...)...)
				t.Cleanup(func() { g.Close() })
				ctx := t.Context()
				for i := range 2 {
					if d, err := g.Admit(ctx, "before"); err != nil || d.Outcome != admission.Admitted {
						t.Fatalf("Admit %d = %+v, %v; want admitted", i, d, err)
					}
				}
				if how == "restart" {
					srv.Restart()
				} else if err := rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
				if rdb.ScriptExists(ctx, sha).Val()[0] {
					t.Fatal("the script is still cached")
				}
				// After a restart the pool's connections are dead: calls
				// may fail as unavailable until go-redis has new ones. A
				// flushed script cache must cost no error at all.
				var d admission.Decision
				var err error
				waitFor(t, 5*time.Second, "an answer from Redis", func() bool {
					d, err = g.Admit(ctx, "after")
					return how == "script flush" || !errors.Is(err, admission.ErrUnavailable)
				})
				if err != nil || d.Outcome != admission.Admitted || d.Local {
					t.Fatalf("Admit after %s = %+v, %v; want admitted by Redis", how, d, err)
				}
				if !rdb.ScriptExists(ctx, sha).Val()[0] {
					t.Fatal("the script is not cached again")
				}
				u, err := g.Usage(ctx, "before")
				if err != nil {
					t.Fatal(err)
				}
				if want := map[string]int{"restart": 0, "script flush": 2}[how]; u.InWindow != want {
					t.Fatalf("Usage after %s = %+v, want %d in the window", how, u, want)
				}
			})
		}
	}
}
