package redistest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartServesCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := Start(t)
	rdb := srv.Client(t)

	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want \"v\", nil", got, err)
	}
	if host, _, _ := net.SplitHostPort(srv.Addr()); host != "127.0.0.1" {
		t.Errorf("Addr() = %q, want a 127.0.0.1 address", srv.Addr())
	}
	if want := "redis://" + srv.Addr(); srv.URL() != want {
		t.Errorf("URL() = %q, want %q", srv.URL(), want)
	}
}

func TestServersAreIndependent(t *testing.T) {
	t.Parallel()
	for i := range 6 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			rdb := Start(t).Client(t)
			ctx := context.Background()
			// Every server starts empty, so no test sees another's keys.
			if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
				t.Fatalf("DBSIZE = %d, %v; want 0, nil", n, err)
			}
			if err := rdb.Set(ctx, "shared-name", i, 0).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
		})
	}
}

func TestKillThenRestartComesBackEmptyOnSameAddr(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := Start(t)
	rdb := srv.Client(t)
	addr := srv.Addr()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	srv.Kill()
	if err := failFast(t, srv.Options()).Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Kill succeeded, want an error")
	}
	srv.Kill() // a second Kill is harmless

	srv.Restart()
	if srv.Addr() != addr {
		t.Errorf("Addr() after Restart = %q, want %q", srv.Addr(), addr)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after Restart: err = %v, want redis.Nil (data gone)", err)
	}
}

func TestRestartWhileRunningActsAsCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := Start(t)
	rdb := srv.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	srv.Restart()
	if n, err := rdb.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after Restart = %d, %v; want 0, nil", n, err)
	}
}

func TestStopIsIdempotent(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	srv.Stop()
	srv.Stop()
	if err := failFast(t, srv.Options()).Ping(context.Background()).Err(); err == nil {
		t.Fatal("PING after Stop succeeded, want an error")
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		desc      string
		opts      []Option
		wantUser  string // ACL WHOAMI when logged in with Options()
		noCreds   string // error without credentials contains this
		wrongUser string // user name to try with the wrong password
	}{
		{
			desc:     "password protects the default user",
			opts:     []Option{WithPassword("pw with spaces & \"quotes\"")},
			wantUser: "default",
			noCreds:  "NOAUTH",
		},
		{
			desc:      "ACL user only, default user off",
			opts:      []Option{WithACLUser("alice", "s3cret")},
			wantUser:  "alice",
			noCreds:   "NOAUTH",
			wrongUser: "alice",
		},
		{
			desc:     "ACL user next to a password for the default user",
			opts:     []Option{WithPassword("defaultpw"), WithACLUser("bob", "bobpw")},
			wantUser: "bob",
			noCreds:  "NOAUTH",
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			srv := Start(t, tc.opts...)

			if got, err := srv.Client(t).Do(ctx, "ACL", "WHOAMI").Text(); err != nil || got != tc.wantUser {
				t.Errorf("ACL WHOAMI with Options() = %q, %v; want %q, nil", got, err, tc.wantUser)
			}

			anon := srv.Options()
			anon.Username, anon.Password = "", ""
			if err := failFast(t, anon).Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), tc.noCreds) {
				t.Errorf("PING without credentials: err = %v, want one containing %q", err, tc.noCreds)
			}

			wrong := srv.Options()
			wrong.Username, wrong.Password = tc.wrongUser, "wrong"
			if err := failFast(t, wrong).Ping(ctx).Err(); err == nil {
				t.Error("PING with a wrong password succeeded, want an error")
			}

			u, err := redis.ParseURL(srv.URL())
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", srv.URL(), err)
			}
			if err := newClient(t, u).Ping(ctx).Err(); err != nil {
				t.Errorf("PING with options from URL() %q: %v", srv.URL(), err)
			}
			redisCLI(t, srv, "PING")
		})
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := Start(t, WithTLS(), WithPassword("pw"))

	if err := srv.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS with Options(): %v", err)
	}
	if !strings.HasPrefix(srv.URL(), "rediss://") {
		t.Errorf("URL() = %q, want rediss://", srv.URL())
	}
	if _, err := os.Stat(srv.CACertFile()); err != nil {
		t.Errorf("CACertFile(): %v", err)
	}

	plain := srv.Options()
	plain.TLSConfig = nil
	if err := failFast(t, plain).Ping(ctx).Err(); err == nil {
		t.Error("PING over plain TCP succeeded, want an error")
	}

	untrusted := srv.Options()
	untrusted.TLSConfig.RootCAs = nil // the system roots do not know our CA
	if err := failFast(t, untrusted).Ping(ctx).Err(); err == nil {
		t.Error("PING with a client that does not trust the CA succeeded, want an error")
	}

	redisCLI(t, srv, "PING")
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := StartCluster(t)
	rdb := c.Client(t)

	for _, addr := range c.Addrs() {
		info, err := newClient(t, &redis.Options{Addr: addr}).ClusterInfo(ctx).Result()
		if err != nil {
			t.Fatalf("%s: CLUSTER INFO: %v", addr, err)
		}
		if f := infoFields(info); f["cluster_state"] != "ok" || f["cluster_size"] != "3" {
			t.Errorf("%s: cluster_state=%q cluster_size=%q, want ok, 3", addr, f["cluster_state"], f["cluster_size"])
		}
	}

	owners := map[string]int{} // master address -> keys it holds
	for i := range 100 {
		key := fmt.Sprintf("key:%d", i)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		if got, err := rdb.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d, nil", key, got, err, i)
		}
		owners[masterFor(t, rdb, key)]++
	}
	if len(owners) != 3 {
		t.Errorf("100 keys landed on %d masters (%v), want all 3", len(owners), owners)
	}

	// Keys sharing a hash tag share a slot, so multi-key commands work.
	tagged := []string{"{tenant-a}:tokens", "{tenant-a}:slots", "{tenant-a}:quota"}
	first := masterFor(t, rdb, tagged[0])
	for _, k := range tagged[1:] {
		if got := masterFor(t, rdb, k); got != first {
			t.Errorf("%s is on %s, %s on %s; want one node", tagged[0], first, k, got)
		}
	}
	if err := rdb.MSet(ctx, tagged[0], 1, tagged[1], 2, tagged[2], 3).Err(); err != nil {
		t.Errorf("MSET of {tenant-a} keys: %v", err)
	}

	// A restarted node rejoins with its slots (nodes.conf survives) but
	// without its keys. Not a subtest: Restart must run on the goroutine of
	// the test that started the cluster.
	victim := c.Nodes()[0]
	victim.Restart()
	c.WaitHealthy(t)
	var lost, kept int
	for i := range 100 {
		key := fmt.Sprintf("key:%d", i)
		err := rdb.Get(ctx, key).Err()
		switch {
		case errors.Is(err, redis.Nil):
			lost++
			if owner := masterFor(t, rdb, key); owner != victim.Addr() {
				t.Errorf("%s on %s was lost, but only %s restarted", key, owner, victim.Addr())
			}
		case err != nil:
			t.Fatalf("GET %s after restart: %v", key, err)
		default:
			kept++
		}
	}
	if want := owners[victim.Addr()]; lost != want || kept != 100-want {
		t.Errorf("after restarting %s: lost %d keys, kept %d; want lost %d (its keys), kept %d",
			victim.Addr(), lost, kept, want, 100-want)
	}
}

// TestNeverUsesAnotherProcessPort shows that a server that loses its port to
// another process, even another Redis, is reported as such rather than
// mistaken for ready.
func TestNeverUsesAnotherProcessPort(t *testing.T) {
	t.Parallel()
	other := Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	for _, occupier := range []struct {
		desc string
		port int
	}{
		{"a plain listener", l.Addr().(*net.TCPAddr).Port},
		{"another redis-server", other.port},
	} {
		s := &Server{t: t, bin: RequireRedis(t), dir: t.TempDir(), port: occupier.port}
		start := time.Now()
		err := s.launchLocked()
		if !errors.Is(err, errPortTaken) {
			t.Errorf("start on the port of %s: err = %v, want errPortTaken", occupier.desc, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("start on the port of %s took %v to fail, want it noticed at once", occupier.desc, d)
		}
		if s.cmd != nil {
			t.Errorf("start on the port of %s left a process behind", occupier.desc)
			s.Kill()
		}
	}
	if err := other.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Errorf("the other redis-server is hurt: %v", err)
	}
}

func TestStartFailureReportsLog(t *testing.T) {
	t.Parallel()
	start := time.Now()
	out := runTB(t, func(tb testing.TB) { Start(tb, WithArgs("--no-such-directive", "1")) })
	if out.fatal == "" {
		t.Fatal("Start with a bad directive did not fail the test")
	}
	if !strings.Contains(out.fatal, "Bad directive") {
		t.Errorf("failure message lacks redis-server's log:\n%s", out.fatal)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("failing Start took %v, want the exit noticed at once", d)
	}
}

func TestRequireRedis(t *testing.T) {
	// No t.Parallel: Setenv changes the whole process.
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("needs redis-server on PATH to compare against")
	}
	if got := RequireRedis(t); got == "" {
		t.Fatal("RequireRedis returned \"\" with redis-server on PATH")
	}

	t.Setenv("PATH", t.TempDir())
	t.Setenv(RequireEnv, "")
	if out := runTB(t, func(tb testing.TB) { requireRedis(tb, io.Discard) }); out.skip == "" || out.fatal != "" ||
		!strings.Contains(out.skip, "apt-get install redis-server redis-tools") {
		t.Errorf("without redis-server: skip = %q, fatal = %q; want a skip saying how to install", out.skip, out.fatal)
	}
	t.Setenv(RequireEnv, "1")
	if out := runTB(t, func(tb testing.TB) { requireRedis(tb, io.Discard) }); out.fatal == "" || out.skip != "" {
		t.Errorf("without redis-server under %s=1: skip = %q, fatal = %q; want a failure", RequireEnv, out.skip, out.fatal)
	}
}

// masterFor returns the address of the master that serves key.
func masterFor(t *testing.T, rdb *redis.ClusterClient, key string) string {
	t.Helper()
	m, err := rdb.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatalf("MasterForKey(%q): %v", key, err)
	}
	return m.Options().Addr
}

func newClient(t *testing.T, opt *redis.Options) *redis.Client {
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// failFast returns a client for opt that gives up on the first failed dial,
// for checks that expect one.
func failFast(t *testing.T, opt *redis.Options) *redis.Client {
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	return newClient(t, opt)
}

// redisCLI runs redis-cli against srv by its URL, as CLI tests will, and
// checks that it gets PONG.
func redisCLI(t *testing.T, srv *Server, args ...string) {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Log("redis-cli not on PATH; skipping the redis-cli check")
		return
	}
	cliArgs := []string{"-u", srv.URL()}
	if f := srv.CACertFile(); f != "" {
		cliArgs = append(cliArgs, "--tls", "--cacert", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, append(cliArgs, args...)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PONG") {
		t.Errorf("redis-cli %q: %v\n%s", cliArgs, err, out)
	}
}

// fakeTB records what a helper would do to a test, so its failure paths can
// be tested without failing this test.
type fakeTB struct {
	testing.TB
	mu          sync.Mutex
	fatal, skip string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatal(args ...any) { f.stop(&f.fatal, fmt.Sprint(args...)) }

func (f *fakeTB) Fatalf(format string, args ...any) { f.stop(&f.fatal, fmt.Sprintf(format, args...)) }

func (f *fakeTB) Skip(args ...any) { f.stop(&f.skip, fmt.Sprint(args...)) }

func (f *fakeTB) Skipf(format string, args ...any) { f.stop(&f.skip, fmt.Sprintf(format, args...)) }

func (f *fakeTB) stop(field *string, msg string) {
	f.mu.Lock()
	*field = msg
	f.mu.Unlock()
	runtime.Goexit()
}

// runTB runs fn with a fakeTB in its own goroutine, as Fatal and Skip end
// that goroutine, and returns what fn did. Cleanups go to t.
func runTB(t *testing.T, fn func(testing.TB)) *fakeTB {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f
}
