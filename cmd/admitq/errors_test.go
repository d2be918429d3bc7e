package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/internal/redistest"
)

// TestBadInput: every bad command line exits with one line on stderr, and
// writes nothing to Redis.
func TestBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	url := srv.URL()
	long := strings.Repeat("x", 257)
	payload := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(payload, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}

	chartDir := filepath.Join(t.TempDir(), "chart.svg")
	if err := os.Mkdir(chartDir, 0o700); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		desc string
		args []string
		code int
		want string // in stderr
	}{
		{"unknown command", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"unknown flag", []string{"--redis", url, "quota", "list", "--jsno"}, exitUsage, "--jsno"},
		{"limit not a number", []string{"--redis", url, "quota", "set", "acme", "--limit", "ten", "--window", "1s"}, exitUsage, "--limit"},
		{"limit zero", []string{"--redis", url, "quota", "set", "acme", "--limit", "0", "--window", "1s"}, exitUsage, "--limit 0: want at least 1"},
		{"window missing", []string{"--redis", url, "quota", "set", "acme", "--limit", "5"}, exitUsage, "--window is required"},
		{"window below 1ms", []string{"--redis", url, "quota", "set", "acme", "--limit", "5", "--window", "10us"}, exitUsage, "--window 10µs"},
		{"window not a duration", []string{"--redis", url, "quota", "set", "acme", "--limit", "5", "--window", "soon"}, exitUsage, "--window"},
		{"mode unknown", []string{"--redis", url, "quota", "set", "acme", "--limit", "5", "--window", "1s", "--mode", "fixed"}, exitUsage, `--mode "fixed": want log or counter`},
		{"mode empty", []string{"--redis", url, "quota", "set-default", "--limit", "5", "--window", "1s", "--mode", ""}, exitUsage, `--mode "": want log or counter`},
		{"mode capitalised", []string{"--redis", url, "quota", "set", "acme", "--limit", "5", "--window", "1s", "--mode", "Counter"}, exitUsage, `--mode "Counter"`},
		{"negative max delay", []string{"--redis", url, "quota", "set-default", "--limit", "5", "--window", "1s", "--max-delay", "-1s"}, exitUsage, "--max-delay -1s"},
		{"tenant with a control character", []string{"--redis", url, "quota", "set", "ac\x01me", "--limit", "5", "--window", "1s"}, exitUsage, "invalid tenant"},
		{"tenant too long", []string{"--redis", url, "quota", "set", long, "--limit", "5", "--window", "1s"}, exitUsage, "257 bytes"},
		{"tenant not UTF-8", []string{"--redis", url, "quota", "delete", "\xff"}, exitUsage, "not valid UTF-8"},
		{"empty tenant", []string{"--redis", url, "enqueue", "--tenant", "", "--type", "x"}, exitUsage, "invalid tenant: empty"},
		{"get without a tenant", []string{"--redis", url, "quota", "get"}, exitUsage, "quota get: TENANT is missing"},
		{"set without a tenant", []string{"--redis", url, "quota", "set", "--limit", "5", "--window", "1s"}, exitUsage, "quota set: TENANT is missing"},
		{"delete with two tenants", []string{"--redis", url, "quota", "delete", "a", "b"}, exitUsage, "want one TENANT, got 2"},
		{"quota without a command", []string{"--redis", url, "quota"}, exitUsage, "quota needs a command: delete, delete-default, get, list, pause, resume, set, set-default, update"},
		{"quota with an unknown command", []string{"--redis", url, "quota", "bogus"}, exitUsage, `unknown command "bogus" for "admitq quota"`},
		{"status of a bad tenant", []string{"--redis", url, "status", "a\nb"}, exitUsage, "invalid tenant"},
		{"enqueue without a type", []string{"--redis", url, "enqueue", "--tenant", "acme"}, exitUsage, "--type is required"},
		{"payload not JSON", []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x", "--payload", "{oops"}, exitUsage, "--payload: not valid JSON"},
		{"payload file not JSON", []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x", "--payload", "@" + payload}, exitUsage, "not valid JSON"},
		{"payload file missing", []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x", "--payload", "@/no/such/file"}, exitUsage, "/no/such/file"},
		{"worker concurrency zero", []string{"--redis", url, "worker", "--concurrency", "0"}, exitUsage, "--concurrency 0"},
		{"worker queue weight", []string{"--redis", url, "worker", "--queues", "critical=high"}, exitUsage, `weight "high"`},
		{"worker queue without a weight", []string{"--redis", url, "worker", "--queues", "bad"}, exitUsage, `queue "bad" has no weight`},
		{"demo chart in a missing directory", []string{"demo", "--chart", "/no/such/dir/x.svg"}, exitUsage, "--chart /no/such/dir/x.svg: cannot create a file in /no/such/dir"},
		{"demo chart that is a directory", []string{"demo", "--chart", chartDir}, exitUsage, "is a directory"},
		{"demo chart format", []string{"demo", "--chart", "demo.gif"}, exitUsage, "--chart demo.gif"},
		{"demo duration", []string{"demo", "--duration", "0s"}, exitUsage, "--duration 0s"},
		{"timeout zero", []string{"--redis", url, "--timeout", "0s", "quota", "list"}, exitUsage, "--timeout 0s"},
		{"empty prefix", []string{"--redis", url, "--prefix", "", "quota", "list"}, exitUsage, "--prefix is empty"},
		{"type with a newline", []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x\ny"}, exitUsage, "a task type holds no control characters"},
		{"blank dashboard token", []string{"--redis", url, "dashboard", "--addr", "0.0.0.0:0", "--auth-token", "   "}, exitUsage, "--auth-token (or ADMITQ_DASHBOARD_TOKEN) is blank"},
		{"prefix with a brace", []string{"--redis", url, "--prefix", "app{1}", "quota", "set", "acme", "--limit", "5", "--window", "1s"}, exitUsage, "--prefix \"app{1}\" has a brace"},
		{"redis URL scheme", []string{"--redis", "http://127.0.0.1:6379", "quota", "list"}, exitUsage, "--redis http://127.0.0.1:6379"},
		{"redis URL port", []string{"--redis", "redis://alice:hunter2@127.0.0.1:port", "quota", "list"}, exitUsage, "--redis redis://xxxxx@127.0.0.1:port"},
		{"redis URL database", []string{"--redis", "redis://127.0.0.1:6379/db", "quota", "list"}, exitUsage, "--redis redis://127.0.0.1:6379/db"},
		{"redis and cluster", []string{"--redis", url, "--redis-cluster", "127.0.0.1:7000", "quota", "list"}, exitUsage, "give one"},
		{"cluster node without port", []string{"--redis-cluster", "127.0.0.1", "quota", "list"}, exitUsage, `node "127.0.0.1"`},
		{"bench on redis and a cluster", []string{"--redis", url, "bench", "--redis-cluster"}, exitUsage, "give one"},
		{"bench neighbour on a cluster", []string{"bench", "--redis-cluster", "--only", "neighbour"}, exitUsage, "runs on one Redis server"},
		{"tls-ca without rediss", []string{"--redis", url, "--tls-ca", payload, "quota", "list"}, exitUsage, "--tls-ca needs a rediss:// URL"},
		{"status match with an unclosed class", []string{"--redis", url, "status", "--match", "["}, exitUsage, `--match "[": not a valid glob`},
		{"status match with a trailing backslash", []string{"--redis", url, "status", "--match", `acme\`}, exitUsage, "not a valid glob"},
		{"empty redis", []string{"--redis", "", "quota", "list"}, exitUsage, "--redis is empty"},
		{"blank redis", []string{"--redis", " ", "status"}, exitUsage, "--redis is empty"},
		{"empty redis cluster", []string{"--redis-cluster", "", "quota", "list"}, exitUsage, "--redis-cluster is empty"},
		{"empty redis for the demo", []string{"--redis", "", "demo"}, exitUsage, "--redis is empty"},
		{"queue with a space", []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x", "--queue", "my queue"}, exitUsage, `--queue "my queue": a queue name holds no spaces or control characters`},
		{"queue with a control character", []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x", "--queue", "lo\x01w"}, exitUsage, "no spaces or control characters"},
		{"queue with a tab", []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x", "--queue", "lo\tw"}, exitUsage, "no spaces or control characters"},
		{"queue not UTF-8", []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x", "--queue", "\xff"}, exitUsage, "not valid UTF-8"},
		{"queue blank", []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x", "--queue", " "}, exitUsage, "--queue is empty"},
		{"id with a control character", []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x", "--id", "a\x1bb"}, exitUsage, "holds no control characters"},
		{"id not UTF-8", []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x", "--id", "\xff"}, exitUsage, "valid UTF-8"},
		{"worker queue with a space", []string{"--redis", url, "worker", "--queues", "my queue=1"}, exitUsage, `queue "my queue": a queue name holds no spaces`},
		{"extra argument to demo", []string{"demo", "extra"}, exitUsage, `demo takes no arguments; got "extra"`},
		{"extra argument to enqueue", []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x", "extra"}, exitUsage, `enqueue takes no arguments; got "extra"`},
		{"extra argument to quota list", []string{"--redis", url, "quota", "list", "extra"}, exitUsage, `quota list takes no arguments; got "extra"`},
		{"extra argument to quota delete-default", []string{"--redis", url, "quota", "delete-default", "acme"}, exitUsage, `quota delete-default takes no arguments; got "acme"`},
		{"extra argument to worker", []string{"--redis", url, "worker", "extra"}, exitUsage, `worker takes no arguments; got "extra"`},
		{"negative weight", []string{"--redis", url, "quota", "set", "acme", "--limit", "5", "--window", "1s", "--weight", "-1"}, exitUsage, "--weight -1: want 0 (meaning 1) up to 1000000"},
		{"NaN weight", []string{"--redis", url, "quota", "set", "acme", "--limit", "5", "--window", "1s", "--weight", "NaN"}, exitUsage, "--weight NaN"},
		{"infinite weight", []string{"--redis", url, "quota", "set-default", "--limit", "5", "--window", "1s", "--weight", "Inf"}, exitUsage, "--weight +Inf"},
		{"weight too big", []string{"--redis", url, "quota", "set", "acme", "--limit", "5", "--window", "1s", "--weight", "2e6"}, exitUsage, "--weight 2000000"},
		{"weight not a number", []string{"--redis", url, "quota", "set", "acme", "--limit", "5", "--window", "1s", "--weight", "heavy"}, exitUsage, "--weight"},
		{"tls-ca not PEM", []string{"--redis", "rediss://127.0.0.1:1", "--tls-ca", payload, "quota", "list"}, exitUsage, "no PEM certificate"},
	} {
		t.Run(c.desc, func(t *testing.T) {
			res := admitq(t, c.args...)
			if res.code != c.code || !strings.Contains(res.stderr, c.want) {
				t.Errorf("%v\nwant exit %d and stderr holding %q", res, c.code, c.want)
			}
			oneLine(t, c.desc, res.stderr)
			if strings.Contains(res.stderr, "hunter2") || strings.Contains(res.stdout, "hunter2") {
				t.Errorf("output holds the password: %v", res)
			}
			if n, err := rdb.DBSize(t.Context()).Result(); err != nil || n != 0 {
				t.Errorf("DBSIZE = %d, %v after a bad command; want 0", n, err)
			}
		})
	}
}

func TestUnreachableRedisNamesTheAddress(t *testing.T) {
	t.Parallel()
	// A port nothing listens on, and a server that accepts and never answers.
	refused := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()

	for _, c := range []struct {
		desc string
		addr string
		args []string
	}{
		{"connection refused", refused, []string{"quota", "list"}},
		{"no answer", silent.Addr().String(), []string{"status"}},
		{"worker, connection refused", refused, []string{"worker", "--metrics-addr", ""}},
		{"enqueue, no answer", silent.Addr().String(), []string{"enqueue", "--tenant", "acme", "--type", "x"}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			res := admitq(t, append([]string{"--redis", "redis://alice:hunter2@" + c.addr + "/3"}, c.args...)...)
			elapsed := time.Since(start)
			if res.code != exitFailure || !strings.Contains(res.stderr, "cannot reach Redis at redis://"+c.addr+"/3") {
				t.Errorf("%v\nwant exit 1 naming redis://%s/3", res, c.addr)
			}
			oneLine(t, c.desc, res.stderr)
			if strings.Contains(res.stderr, "hunter2") || strings.Contains(res.stdout, "hunter2") {
				t.Errorf("output holds the password: %v", res)
			}
			if elapsed > 5*time.Second {
				t.Errorf("took %v to give up, want under 5s", elapsed)
			}
		})
	}
}

func TestRedisFromEnvironment(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	env := map[string]string{"ADMITQ_REDIS": srv.URL()}
	if res := admitqEnv(t, env, "quota", "set", "acme", "--limit", "3", "--window", "1s"); res.code != 0 {
		t.Fatal(res)
	}
	if n := srv.Client(t).HLen(t.Context(), "admitq:quotas").Val(); n != 1 {
		t.Errorf("ADMITQ_REDIS: %d quotas in its server, want 1", n)
	}
	// --redis wins over the environment.
	env["ADMITQ_REDIS"] = "redis://127.0.0.1:1"
	if res := admitqEnv(t, env, "--redis", srv.URL(), "quota", "get", "acme"); res.code != 0 {
		t.Errorf("--redis over ADMITQ_REDIS: %v", res)
	}
	// --prefix moves every key.
	if res := admitqEnv(t, env, "--redis", srv.URL(), "--prefix", "other", "quota", "set", "acme", "--limit", "3", "--window", "1s"); res.code != 0 {
		t.Fatal(res)
	}
	if n := srv.Client(t).HLen(t.Context(), "other:quotas").Val(); n != 1 {
		t.Errorf("--prefix other: %d quotas under other:quotas, want 1", n)
	}
}
