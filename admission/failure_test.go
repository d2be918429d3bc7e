package admission

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/admitq/admitq/internal/redistest"
)

// Failure behaviour without a Redis to kill: the fallback limiter and the
// breaker on their own, and gates pointed at addresses that refuse or
// swallow connections. The chaos tests do the same to real servers.

// fakeClock is a settable clock for the local limiter.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// logBuffer is a slog handler's destination that tests can read while the
// breaker writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestBreaker: it opens after threshold failures in a row, probes in the
// background, closes within a probe interval of the probe succeeding, and
// Close stops the probe.
func TestBreaker(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var up atomic.Bool
	var probes atomic.Int32
	var logs logBuffer
	b := newBreaker(func(ctx context.Context) error {
		probes.Add(1)
		if up.Load() {
			return nil
		}
		<-ctx.Done() // a black hole: the probe waits out its timeout
		return ctx.Err()
	}, 20*time.Millisecond, logs.logger())
	b.probeEvery = 10 * time.Millisecond
	down := errors.New("down")

	b.failure(down, time.Now())
	b.failure(down, time.Now())
	b.success() // a success in between: the count starts again
	b.failure(down, time.Now())
	b.failure(down, time.Now())
	if b.isOpen() {
		t.Fatal("open after 2 failures in a row")
	}
	b.failure(down, time.Now())
	if !b.isOpen() {
		t.Fatal("closed after 3 failures in a row")
	}
	waitUntil(t, time.Second, "3 probes", func() bool { return probes.Load() >= 3 })
	b.success() // a call that began before the outage: not a probe
	if !b.isOpen() {
		t.Fatal("closed by a straggling success")
	}

	up.Store(true)
	answered := time.Now()
	waitUntil(t, time.Second, "the breaker to close", func() bool { return !b.isOpen() })
	t.Logf("closed %v after the probe could succeed (probe every %v)", time.Since(answered).Round(time.Millisecond), b.probeEvery)
	if log := logs.String(); !strings.Contains(log, "breaker open") || !strings.Contains(log, "breaker closed") {
		t.Fatalf("log = %q, want the breaker opening and closing", log)
	}

	up.Store(false)
	for range 3 {
		b.failure(down, time.Now())
	}
	if !b.isOpen() {
		t.Fatal("did not open again")
	}
	b.close()
	b.close() // idempotent
	before := probes.Load()
	for range 3 {
		b.failure(down, time.Now())
	}
	if probes.Load() != before {
		t.Fatal("probed after close")
	}
}

// TestBreakerHangingProbe: a probe that ignores its deadline, as a go-redis
// call to a frozen Redis does without ContextTimeoutEnabled, is not issued
// again while it hangs, and Close does not wait for it. Before, Close of a
// gate on a frozen Redis took 10s (two go-redis ReadTimeouts).
func TestBreakerHangingProbe(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	release := make(chan struct{})
	var probes atomic.Int32
	b := newBreaker(func(context.Context) error {
		probes.Add(1)
		<-release
		return nil
	}, 10*time.Millisecond, slog.New(slog.DiscardHandler))
	b.probeEvery = 5 * time.Millisecond
	for range 3 {
		b.failure(errors.New("down"), time.Now())
	}
	waitUntil(t, time.Second, "a probe", func() bool { return probes.Load() == 1 })
	time.Sleep(10 * b.probeEvery) // ticks pass while the probe hangs
	if n := probes.Load(); n != 1 {
		t.Fatalf("%d probes in flight at once, want 1", n)
	}
	start := time.Now()
	b.close()
	if took := time.Since(start); took > 50*time.Millisecond {
		t.Fatalf("close took %v waiting for a hanging probe", took)
	}
	close(release) // the client gives up or is closed: the probe ends
}

// TestBreakerRecoversWithinASecond: with the gate's own settings, the
// breaker closes within 1s of Redis answering again.
func TestBreakerRecoversWithinASecond(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var up atomic.Bool
	b := newBreaker(func(context.Context) error {
		if up.Load() {
			return nil
		}
		return errors.New("connection refused")
	}, DefaultTimeout, slog.New(slog.DiscardHandler))
	defer b.close()
	for range 3 {
		b.failure(errors.New("down"), time.Now())
	}
	time.Sleep(3 * b.probeEvery / 2) // let probes fail, so the next is a tick away
	up.Store(true)
	answered := time.Now()
	waitUntil(t, time.Second, "the breaker to close after Redis answers", func() bool { return !b.isOpen() })
	t.Logf("closed %v after Redis answered", time.Since(answered).Round(time.Millisecond))
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not within %v", what, d)
		}
		time.Sleep(time.Millisecond)
	}
}

// deadAddr returns a loopback address that refuses connections: a socket
// bound to it but not listening, which also keeps the port from any
// redis-server another test starts, until the test ends.
func deadAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// blackHole returns a loopback address that accepts connections and never
// answers: a frozen or partitioned Redis, without root. It is closed when
// the test ends.
func blackHole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String()
}

// TestUnreachable: a gate whose Redis refuses or swallows connections.
// FailClosed returns errors wrapping ErrUnavailable; FailOpen decides
// locally. Either way, after the breaker opens no call waits for Redis,
// for tenants with and without a cap alike.
func TestUnreachable(t *testing.T) {
	// Long enough to tell a call that waits for Redis from one that does
	// not, through the scheduling noise of a busy machine.
	const timeout = 100 * time.Millisecond
	for _, where := range []string{"refused", "black hole"} {
		for _, batching := range []bool{true, false} {
			for _, policy := range []FailurePolicy{FailClosed, FailOpen} {
				for _, capped := range []bool{false, true} {
					q := Quota{Limit: 8, Window: time.Minute, MaxDelay: time.Hour}
					if capped {
						q.MaxInFlight = 100
					}
					t.Run(fmt.Sprintf("%s/batching=%v/%v/capped=%v", where, batching, policy, capped), func(t *testing.T) {
						addr := deadAddr(t)
						if where == "black hole" {
							addr = blackHole(t)
						}
						// An ordinary client: ContextTimeoutEnabled off, so on a
						// black hole go-redis itself waits for ReadTimeout (5s).
						rdb := redis.NewClient(&redis.Options{Addr: addr})
						defer rdb.Close()
						g := New(rdb, StaticQuotas{Default: &q}, WithTimeout(timeout), WithBatching(batching),
							WithFailurePolicy(policy), WithInstances(2))
						defer func() {
							start := time.Now()
							g.Close()
							if took := time.Since(start); took > timeout+latencySlack {
								t.Errorf("Close took %v, want at most the timeout %v", took, timeout)
							}
						}()
						ctx := t.Context()
						var worst time.Duration
						var ds []Decision
						for i := range 20 {
							start := time.Now()
							var d Decision
							var err error
							d, err = g.Admit(ctx, "t")
							took := time.Since(start)
							worst = max(worst, took)
							switch {
							case policy == FailClosed && !errors.Is(err, ErrUnavailable):
								t.Fatalf("call %d: err = %v, want ErrUnavailable", i, err)
							case policy == FailOpen && err != nil:
								t.Fatalf("call %d: err = %v, want a local decision", i, err)
							case took > timeout+latencySlack:
								t.Fatalf("call %d took %v, want at most the timeout %v", i, took, timeout)
							case int64(i) >= g.brk.threshold && took > timeout/2:
								t.Fatalf("call %d took %v with the breaker open, want no wait for Redis", i, took)
							}
							ds = append(ds, d)
						}
						if where == "black hole" && policy == FailClosed {
							// Let a probe go out and hang, for Close to cope with.
							time.Sleep(3 * g.brk.probeEvery / 2)
						}
						if policy == FailOpen {
							if got, want := outcomes(ds), strings.Repeat("a", 4)+strings.Repeat("r", 16); got != want {
								t.Fatalf("local outcomes = %s, want %s: Limit/instances = 4, never deferred", got, want)
							}
						}
						t.Logf("worst call %v", worst.Round(time.Millisecond))
					})
				}
			}
		}
	}
}

// latencySlack is what a call may take beyond its timeout on a loaded
// machine under -race.
const latencySlack = 150 * time.Millisecond

// TestNoPasswordInErrorsOrLogs: whatever goes wrong, neither the password a
// client sends nor the server's shows up in an error or in the gate's log:
// a wrong password (requirepass and ACL user), and a dead address reached
// through URLs that carry one (plain and cluster).
func TestNoPasswordInErrorsOrLogs(t *testing.T) {
	const (
		serverPW = "server-secret-5f2a"
		aclPW    = "acl-secret-91c7"
		wrongPW  = "wrong-secret-3e8d"
		urlPW    = "url-secret-b04e"
	)
	secrets := []string{serverPW, aclPW, wrongPW, urlPW}
	withPW := redistest.Start(t, redistest.WithPassword(serverPW))
	withACL := redistest.Start(t, redistest.WithACLUser("admitq", aclPW))

	wrongDefault := withPW.Options()
	wrongDefault.Password = wrongPW
	wrongACL := withACL.Options()
	wrongACL.Password = wrongPW
	noPW := withACL.Options()
	noPW.Username, noPW.Password = "", ""
	deadURL, err := redis.ParseURL("redis://admitq:" + urlPW + "@" + deadAddr(t) + "/0")
	if err != nil {
		t.Fatal(err)
	}
	deadCluster, err := redis.ParseClusterURL("redis://admitq:" + urlPW + "@" + deadAddr(t) + "?addr=" + deadAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	clients := []struct {
		desc string
		rdb  redis.UniversalClient
	}{
		{"wrong password", redis.NewClient(wrongDefault)},
		{"wrong ACL password", redis.NewClient(wrongACL)},
		{"no password for an ACL server", redis.NewClient(noPW)},
		{"dead address from a URL with a password", redis.NewClient(deadURL)},
		{"dead cluster from a URL with a password", redis.NewClusterClient(deadCluster)},
	}
	q := Quota{Limit: 5, Window: time.Second}
	for _, c := range clients {
		t.Run(c.desc, func(t *testing.T) {
			defer c.rdb.Close()
			var logs logBuffer
			var errs []error
			note := func(err error) {
				if err != nil {
					errs = append(errs, err)
				}
			}
			ctx := t.Context()
			opts := []Option{WithLogger(logs.logger()), WithTimeout(30 * time.Millisecond)}
			store := NewRedisQuotas(c.rdb, opts...)
			note(store.Set(ctx, "t", q))
			note(store.SetDefault(ctx, q))
			_, err := store.Get(ctx, "t")
			note(err)
			_, err = store.List(ctx)
			note(err)
			_, err = store.Quota(ctx, "t")
			note(err)
			note(store.Delete(ctx, "t"))
			for _, policy := range []FailurePolicy{FailClosed, FailOpen} {
				for _, batching := range []bool{true, false} {
					g := New(c.rdb, StaticQuotas{Default: &q}, append(opts, WithFailurePolicy(policy), WithBatching(batching))...)
					for range 5 { // enough to open the breaker, which logs
						_, err := g.Admit(ctx, "t")
						note(err)
					}
					_, err = g.AdmitBatch(ctx, "t", []string{"x", "y"})
					note(err)
					_, err = g.Usage(ctx, "t")
					note(err)
					note(g.Release(ctx, Decision{Tenant: "t", ID: "x", Outcome: Admitted}))
					_, err = New(c.rdb, store, opts...).Admit(ctx, "t")
					note(err)
					g.Close()
				}
			}
			if len(errs) == 0 {
				t.Fatal("no call failed: the test does not test anything")
			}
			var texts []string
			for _, err := range errs {
				texts = append(texts, err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err))
			}
			log := logs.String()
			for _, s := range secrets {
				for _, text := range texts {
					if strings.Contains(text, s) {
						t.Fatalf("an error holds the password %q: %s", s, text)
					}
				}
				if strings.Contains(log, s) {
					t.Fatalf("the log holds the password %q:\n%s", s, log)
				}
			}
			t.Logf("%d errors, e.g. %v; %d bytes of log", len(errs), errs[0], len(log))
		})
	}
}

// TestFailOpenWithRedisQuotas: under FailOpen, a gate whose quotas live in
// Redis keeps deciding locally while Redis is gone: for tenants whose quota
// it has cached, and, once the breaker is open, without waiting.
func TestFailOpenWithRedisQuotas(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(srv.Options())
	defer rdb.Close()
	ctx := t.Context()
	const timeout = 100 * time.Millisecond
	store := NewRedisQuotas(rdb, WithTimeout(timeout))
	if err := store.SetDefault(ctx, Quota{Limit: 10, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	g := New(rdb, store, WithFailurePolicy(FailOpen), WithTimeout(timeout))
	defer g.Close()
	if d, err := g.Admit(ctx, "known"); err != nil || d.Local {
		t.Fatalf("Admit before the outage = %+v, %v; want a decision from Redis", d, err)
	}
	srv.Kill()
	for i := range 6 {
		for _, tenant := range []string{"known", "new"} {
			start := time.Now()
			d, err := g.Admit(ctx, tenant)
			took := time.Since(start)
			bad := ""
			switch {
			case err != nil || !d.Local:
				bad = fmt.Sprintf("= %+v, %v; want a local decision", d, err)
			case took > timeout+latencySlack:
				bad = fmt.Sprintf("took %v, more than the timeout", took)
			case i >= int(g.brk.threshold) && took > timeout/2:
				bad = fmt.Sprintf("took %v with the breaker open", took)
			}
			if bad != "" {
				t.Errorf("Admit %d of %s %s", i, tenant, bad)
			}
		}
	}
}

// toggleFail fails every HMGET while on, as a dropped connection would.
type toggleFail struct{ on atomic.Bool }

func (h *toggleFail) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *toggleFail) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && cmd.Name() == "hmget" {
			cmd.SetErr(io.EOF)
			return io.EOF
		}
		return next(ctx, cmd)
	}
}
func (h *toggleFail) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestGuessedQuotaNeverReachesRedis: when a quota read fails, the default
// quota RedisQuotas guesses may decide locally under FailOpen, but Redis
// never records slots under it: a tenant whose own quota is 1 a minute must
// not be admitted five times because the default is 100.
func TestGuessedQuotaNeverReachesRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	admin := NewRedisQuotas(srv.Client(t))
	if err := admin.SetDefault(ctx, Quota{Limit: 100, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Set(ctx, "strict", Quota{Limit: 1, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	hook := &toggleFail{}
	quotasRDB := srv.Client(t)
	quotasRDB.AddHook(hook)
	store := NewRedisQuotas(quotasRDB)
	if _, err := store.Quota(ctx, "other"); err != nil { // reads, and remembers, the default
		t.Fatal(err)
	}
	hook.on.Store(true)
	for _, policy := range []FailurePolicy{FailClosed, FailOpen} {
		g := New(srv.Client(t), store, WithFailurePolicy(policy), WithInstances(100))
		for i := range 5 {
			d, err := g.Admit(ctx, "strict")
			switch {
			case policy == FailClosed && !errors.Is(err, ErrUnavailable):
				t.Fatalf("%v: Admit %d = %+v, %v; want ErrUnavailable", policy, i, d, err)
			case policy == FailOpen && (err != nil || !d.Local):
				t.Fatalf("%v: Admit %d = %+v, %v; want a local decision", policy, i, d, err)
			}
		}
		g.Close()
	}
	if n := srv.Client(t).ZCard(ctx, "admitq:{strict}:log").Val(); n != 0 {
		t.Fatalf("Redis recorded %d slots under a guessed quota", n)
	}
}

// TestShortDeadlinesOpenTheBreaker: callers whose own deadlines are shorter
// than the gate's timeout still open the breaker when Redis stops
// answering, since the pipelines they leave behind run to the timeout and
// report to it; after that the gate decides at once (locally, under
// FailOpen) instead of each caller waiting its deadline out.
func TestShortDeadlinesOpenTheBreaker(t *testing.T) {
	srv := redistest.Start(t)
	q := Quota{Limit: 10, Window: time.Second}
	g := New(srv.Client(t), StaticQuotas{Default: &q}, WithTimeout(100*time.Millisecond), WithFailurePolicy(FailOpen))
	defer g.Close()
	if _, err := g.Admit(t.Context(), "warm"); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	defer srv.Resume()
	frozen := time.Now()
	for i := 0; time.Since(frozen) < 3*time.Second; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
		start := time.Now()
		d, err := g.Admit(ctx, "short")
		took := time.Since(start)
		cancel()
		if err == nil {
			if !d.Local || took > 20*time.Millisecond {
				t.Fatalf("call %d: %+v after %v, want a local decision at once", i, d, took)
			}
			t.Logf("call %d decided locally in %v, %v after Redis froze", i, took, time.Since(frozen).Round(time.Millisecond))
			return
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d: %v, want the caller's deadline", i, err)
		}
	}
	t.Fatal("calls waited out their deadlines for 3s: the breaker never opened")
}

// TestStallShorterThanTimeoutOpensNothing: Redis stalls for 80 ms (a slow
// command of another client, a fork) while callers with 25 ms deadlines
// keep calling. Their deadlines end, but the gate's pipelines, which run
// to the 250 ms timeout, get their answers: the breaker stays shut and no
// decision after the stall is made without Redis.
func TestStallShorterThanTimeoutOpensNothing(t *testing.T) {
	srv := redistest.Start(t)
	q := Quota{Limit: 100_000, Window: time.Second}
	g := New(srv.Client(t), StaticQuotas{Default: &q}, WithFailurePolicy(FailOpen))
	defer g.Close()
	if _, err := g.Admit(t.Context(), "warm"); err != nil {
		t.Fatal(err)
	}
	var local, remote, expired atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(t.Context(), 25*time.Millisecond)
				d, err := g.Admit(ctx, fmt.Sprintf("tenant%d", w))
				cancel()
				switch {
				case err != nil:
					expired.Add(1)
				case d.Local:
					local.Add(1)
				default:
					remote.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	srv.Pause()
	time.Sleep(80 * time.Millisecond)
	srv.Resume()
	time.Sleep(400 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("remote %d, local %d, deadlines ended %d", remote.Load(), local.Load(), expired.Load())
	if expired.Load() == 0 {
		t.Fatal("no caller's deadline ended during the stall: the test did not stall Redis")
	}
	if local.Load() != 0 || g.brk.isOpen() {
		t.Fatalf("%d decisions without Redis after an 80 ms stall (breaker open: %v), want none", local.Load(), g.brk.isOpen())
	}
}
