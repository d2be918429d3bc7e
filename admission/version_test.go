package admission_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// fakeVersion makes INFO answer that the server is Redis version: a hook
// in front of a real one, as a Redis 6.2 would answer.
type fakeVersion struct {
	version string
	asked   int
}

func (f *fakeVersion) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *fakeVersion) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "info" {
			f.asked++
			cmd.(*redis.StringCmd).SetVal("# Server\r\nredis_version:" + f.version + "\r\nredis_mode:standalone\r\n")
			return nil
		}
		return next(ctx, cmd)
	}
}

func (f *fakeVersion) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRedisVersion: a gate refuses a Redis older than 7.0 on its first
// call, with an error that names both versions, and writes nothing: on
// Redis 6.2 PEXPIRETIME fails after the script's first writes. It asks once.
func TestRedisVersion(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	q := admission.Quota{Limit: 5, Window: time.Minute}
	for _, c := range []struct {
		desc    string
		version string
		refused bool
	}{
		{"6.2 lacks PEXPIRETIME", "6.2.14", true},
		{"6.0", "6.0.20", true},
		{"5.0", "5.0.7", true},
		{"7.0 has it", "7.0.0", false},
		{"7.2", "7.2.4", false},
		{"a major version with no minor", "8", false},
	} {
		t.Run(c.desc, func(t *testing.T) {
			rdb := srv.Client(t)
			fake := &fakeVersion{version: c.version}
			rdb.AddHook(fake)
			prefix := "v" + c.version
			for _, policy := range []admission.FailurePolicy{admission.FailClosed, admission.FailOpen} {
				g := admission.New(rdb, static(q), admission.WithPrefix(prefix+policy.String()), admission.WithFailurePolicy(policy))
				t.Cleanup(func() { g.Close() })
				for range 3 {
					d, err := g.Admit(t.Context(), "t")
					if !c.refused {
						if err != nil || d.Outcome != admission.Admitted {
							t.Fatalf("%v: Admit = %+v, %v; want admitted", policy, d, err)
						}
						continue
					}
					if !errors.Is(err, admission.ErrRedisVersion) || errors.Is(err, admission.ErrUnavailable) ||
						!strings.Contains(err.Error(), c.version) || !strings.Contains(err.Error(), "7.0") {
						t.Fatalf("%v: Admit error = %v; want ErrRedisVersion naming %s and 7.0, not ErrUnavailable", policy, err, c.version)
					}
				}
				if _, err := g.Usage(t.Context(), "t"); c.refused != errors.Is(err, admission.ErrRedisVersion) {
					t.Fatalf("%v: Usage error = %v; refused should be %v", policy, err, c.refused)
				}
			}
			if fake.asked != 2 {
				t.Errorf("INFO asked %d times by 2 gates, want once each", fake.asked)
			}
			if n := srv.Client(t).Exists(t.Context(), prefix+"fail-closed:{t}:log", prefix+"fail-open:{t}:log").Val(); c.refused != (n == 0) {
				t.Errorf("%d keys written; refused: %v", n, c.refused)
			}
		})
	}
}

// TestRedisVersionUnknown: a server that answers INFO without a version
// (miniredis has no server section) is trusted, and asked only once; one
// that cannot be asked now is asked again on the next call.
func TestRedisVersionUnknown(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	q := admission.Quota{Limit: 5, Window: time.Minute}
	g := admission.New(rdb, static(q), admission.WithTimeout(2*time.Second))
	t.Cleanup(func() { g.Close() })
	for range 3 {
		if d, err := g.Admit(t.Context(), "t"); err != nil || d.Outcome != admission.Admitted {
			t.Fatalf("Admit on miniredis = %+v, %v; want admitted", d, err)
		}
	}

	srv := redistest.Start(t)
	down := srv.Client(t)
	fake := &fakeVersion{version: "6.2.14"}
	srv.Kill()
	g2 := admission.New(down, static(q), admission.WithTimeout(100*time.Millisecond))
	t.Cleanup(func() { g2.Close() })
	if _, err := g2.Admit(t.Context(), "t"); !errors.Is(err, admission.ErrUnavailable) {
		t.Fatalf("Admit with Redis down = %v; want ErrUnavailable", err)
	}
	down.AddHook(fake)
	srv.Restart()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := g2.Admit(t.Context(), "t")
		if errors.Is(err, admission.ErrRedisVersion) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("Admit once Redis is back = %v; want ErrRedisVersion: the version asked again", err)
		}
	}
}

// TestCheckServer: CheckServer passes a Redis admitq can use, and names
// what is wrong with one it cannot: too old, or not answering. (A plain
// client on a cluster node is testClusterCheckServer's.)
func TestCheckServer(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	if err := admission.CheckServer(t.Context(), srv.Client(t)); err != nil {
		t.Fatalf("CheckServer on Redis %s = %v; want nil", "7+", err)
	}

	old := srv.Client(t)
	old.AddHook(&fakeVersion{version: "6.2.14"})
	err := admission.CheckServer(t.Context(), old)
	if !errors.Is(err, admission.ErrRedisVersion) || !strings.Contains(err.Error(), "6.2.14") || !strings.Contains(err.Error(), srv.Addr()) {
		t.Fatalf("CheckServer on Redis 6.2 = %v; want ErrRedisVersion naming 6.2.14 and %s", err, srv.Addr())
	}
	if errors.Is(err, admission.ErrClusterNode) || errors.Is(err, admission.ErrUnavailable) {
		t.Fatalf("CheckServer on Redis 6.2 = %v; want only ErrRedisVersion", err)
	}

	mr := miniredis.RunT(t)
	unknown := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { unknown.Close() })
	if err := admission.CheckServer(t.Context(), unknown); err != nil {
		t.Fatalf("CheckServer on a server whose INFO names no version = %v; want nil (trusted)", err)
	}

	gone := redistest.Start(t)
	down := gone.Client(t)
	gone.Kill()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := admission.CheckServer(ctx, down); !errors.Is(err, admission.ErrUnavailable) {
		t.Fatalf("CheckServer with Redis down = %v; want ErrUnavailable", err)
	}
}

// TestRedisQuotasVersion: every write of a RedisQuotas refuses a Redis
// older than 7.0, with ErrRedisVersion, and writes nothing; it asks the
// version once per store, not once per write, and a store on a newer
// Redis writes.
func TestRedisQuotasVersion(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	q := admission.Quota{Limit: 5, Window: time.Minute}
	old := srv.Client(t)
	fake := &fakeVersion{version: "6.2.14"}
	old.AddHook(fake)
	rq := admission.NewRedisQuotas(old, admission.WithPrefix("vq"))
	writes := []struct {
		desc  string
		write func() error
	}{
		{"Set", func() error { return rq.Set(t.Context(), "t", q) }},
		{"SetDefault", func() error { return rq.SetDefault(t.Context(), q) }},
		{"Delete", func() error { return rq.Delete(t.Context(), "t") }},
		{"DeleteDefault", func() error { return rq.DeleteDefault(t.Context()) }},
		{"SetKey", func() error {
			return rq.SetKey(t.Context(), "api:stripe", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 3})
		}},
		{"DeleteKey", func() error { return rq.DeleteKey(t.Context(), "api:stripe") }},
	}
	for _, w := range writes {
		if err := w.write(); !errors.Is(err, admission.ErrRedisVersion) || !strings.Contains(err.Error(), "6.2.14") {
			t.Errorf("%s on Redis 6.2 = %v; want ErrRedisVersion naming 6.2.14", w.desc, err)
		}
	}
	if fake.asked != 1 {
		t.Errorf("INFO asked %d times by %d writes of one store, want once", fake.asked, len(writes))
	}
	if keys := srv.Client(t).Keys(t.Context(), "vq*").Val(); len(keys) != 0 {
		t.Errorf("refused writes left keys %v", keys)
	}

	good := admission.NewRedisQuotas(srv.Client(t), admission.WithPrefix("vq"))
	if err := good.Set(t.Context(), "t", q); err != nil {
		t.Fatalf("Set on Redis 7+ = %v", err)
	}
	if err := good.SetKey(t.Context(), "api:stripe", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 3}); err != nil {
		t.Fatalf("SetKey on Redis 7+ = %v", err)
	}
}

// testClusterCheckServer: CheckServer passes a cluster client, and refuses
// a plain client pointed at one of the cluster's nodes with
// ErrClusterNode, saying to use a cluster client.
func testClusterCheckServer(t *testing.T, c *redistest.Cluster) {
	if err := admission.CheckServer(t.Context(), c.Client(t)); err != nil {
		t.Fatalf("CheckServer on a cluster client = %v; want nil", err)
	}
	node := redis.NewClient(&redis.Options{Addr: c.Addrs()[0]})
	t.Cleanup(func() { node.Close() })
	err := admission.CheckServer(t.Context(), node)
	if !errors.Is(err, admission.ErrClusterNode) || !strings.Contains(err.Error(), "cluster client") ||
		!strings.Contains(err.Error(), "--redis-cluster") || !strings.Contains(err.Error(), c.Addrs()[0]) {
		t.Fatalf("CheckServer on a plain client to a cluster node = %v; want ErrClusterNode naming the node and the cure", err)
	}
}

// TestCheckServerPassesAClusterWithAMasterDown: on a cluster one of whose
// masters is down, CheckServer passes on the others' answers, so that a
// command or a worker can still start (with cluster-require-full-coverage
// off the other masters serve their slots); with every master down, it
// says Redis is unavailable.
func TestCheckServerPassesAClusterWithAMasterDown(t *testing.T) {
	c := redistest.StartCluster(t)
	rdb := c.Client(t)
	if err := rdb.Ping(t.Context()).Err(); err != nil { // the slots are known
		t.Fatal(err)
	}
	c.Nodes()[2].Kill()
	if err := admission.CheckServer(t.Context(), rdb); err != nil {
		t.Errorf("CheckServer with one master of three down = %v; want nil", err)
	}
	c.Nodes()[0].Kill()
	c.Nodes()[1].Kill()
	if err := admission.CheckServer(t.Context(), rdb); !errors.Is(err, admission.ErrUnavailable) {
		t.Errorf("CheckServer with every master down = %v; want ErrUnavailable", err)
	}
}
