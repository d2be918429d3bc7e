package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/redistest"
)

// Every command that talks to Redis, pointed with --redis (or
// ADMITQ_REDIS) at one node of a Redis Cluster, stops with one line that
// says to name the cluster, and writes nothing.
func TestEveryCommandRefusesAClusterNode(t *testing.T) {
	c := redistest.StartCluster(t)
	node := c.Addrs()[0]
	commands := [][]string{
		{"status"},
		{"status", "acme"},
		{"enqueue", "--tenant", "acme", "--type", "t"},
		{"quota", "set", "acme", "--limit", "5", "--window", "1s"},
		{"quota", "set-default", "--limit", "5", "--window", "1s"},
		{"quota", "get", "acme"},
		{"quota", "list"},
		{"quota", "delete", "acme"},
		{"quota", "delete-default"},
		{"worker", "--metrics-addr", ""},
		{"dashboard", "--addr", "127.0.0.1:0", "--metrics", ""},
		{"bench", "--duration", "100ms", "--rounds", "1", "--warmup", "0"},
		{"bench", "--only", "neighbour", "--duration", "100ms"},
		{"demo", "--duration", "1s"},
	}
	for _, args := range commands {
		for _, via := range []string{"--redis", "ADMITQ_REDIS"} {
			var r result
			if via == "--redis" {
				r = admitq(t, append([]string{"--redis", node}, args...)...)
			} else {
				r = admitqEnv(t, map[string]string{"ADMITQ_REDIS": "redis://" + node}, args...)
			}
			what := strings.Join(args, " ") + " via " + via
			if r.code != exitFailure || !strings.Contains(r.stderr, "is a node of a Redis Cluster") ||
				!strings.Contains(r.stderr, "--redis-cluster") || !strings.Contains(r.stderr, "ADMITQ_REDIS_CLUSTER") ||
				!strings.Contains(r.stderr, "instead of "+via) {
				t.Errorf("%s: %v", what, r)
				continue
			}
			oneLine(t, what, r.stderr)
		}
	}
	// Nothing was written on any master.
	rdb := c.Client(t)
	err := rdb.ForEachMaster(t.Context(), func(ctx context.Context, n *redis.Client) error {
		if keys := n.Keys(ctx, "*").Val(); len(keys) > 0 {
			return fmt.Errorf("%s holds %q", n.Options().Addr, keys)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}

	// The same cluster named as one works.
	mustRun(t, "--redis-cluster", strings.Join(c.Addrs(), ","), "quota", "set", "acme", "--limit", "5", "--window", "1s")
	r := admitqEnv(t, map[string]string{clusterEnv: strings.Join(c.Addrs(), ",")}, "quota", "get", "acme")
	if r.code != 0 || !strings.Contains(r.stdout, "acme: 5/1s") {
		t.Errorf("quota get with %s: %v", clusterEnv, r)
	}
}

// ADMITQ_REDIS and ADMITQ_REDIS_CLUSTER together are a mistake, unless a
// flag says which server to use.
func TestBothRedisVariablesAreAUsageError(t *testing.T) {
	t.Parallel()
	env := map[string]string{"ADMITQ_REDIS": "127.0.0.1:1", clusterEnv: "127.0.0.1:2,127.0.0.1:3"}
	r := admitqEnv(t, env, "quota", "list")
	if r.code != exitUsage || !strings.Contains(r.stderr, "ADMITQ_REDIS and ADMITQ_REDIS_CLUSTER are both set") {
		t.Errorf("both set: %v", r)
	}
	r = admitqEnv(t, env, "--redis", "127.0.0.1:1", "quota", "list")
	if r.code != exitFailure || !strings.Contains(r.stderr, "cannot reach Redis at redis://127.0.0.1:1") {
		t.Errorf("both set, with --redis: %v", r)
	}
}

// A MOVED reply that reaches the user, from a node that did not say it is
// one (INFO refused), reads as the same advice.
func TestMovedReplyNamesTheCluster(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	a := &app{stdout: io.Discard, stderr: &stderr, getenv: func(string) string { return "" }, started: true, redisURL: "redis://u:s3cret@10.0.0.1:7000"}
	code := a.exit(fmt.Errorf("quota list: %w", redis.Error(errMoved("MOVED 3999 10.0.0.2:7001"))), []string{"--redis", a.redisURL})
	if code != exitFailure || !strings.Contains(stderr.String(), "Redis at redis://xxxxx@10.0.0.1:7000 is a node of a Redis Cluster") ||
		strings.Contains(stderr.String(), "s3cret") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errMoved("MOVED 3999 10.0.0.2:7001"), true},
		{fmt.Errorf("status: %w", errMoved("MOVED 1 [::1]:7001")), true},
		{errors.New(`tenant "MOVED 1 a:1" has no quota`), false},
		{errors.New("ASK 3999 10.0.0.2:7001"), false},
		{nil, false},
	} {
		if got := movedReply(tc.err); got != tc.want {
			t.Errorf("movedReply(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

type errMoved string

func (e errMoved) Error() string { return string(e) }
func (errMoved) RedisError()     {}

// Every command refuses a Redis older than 7 in one line, and writes
// nothing: here a fake server that says it is 6.2.
func TestEveryCommandRefusesRedis6(t *testing.T) {
	t.Parallel()
	addr, writes := fakeRedis(t, "6.2.14")
	commands := [][]string{
		{"status"},
		{"enqueue", "--tenant", "acme", "--type", "t"},
		{"quota", "set", "acme", "--limit", "5", "--window", "1s"},
		{"quota", "list"},
		{"worker", "--metrics-addr", ""},
		{"dashboard", "--addr", "127.0.0.1:0", "--metrics", ""},
		{"bench", "--duration", "100ms", "--rounds", "1", "--warmup", "0"},
		{"demo", "--duration", "1s"},
	}
	for _, args := range commands {
		r := admitq(t, append([]string{"--redis", addr}, args...)...)
		what := strings.Join(args, " ")
		if r.code != exitFailure || !strings.Contains(r.stderr, "Redis 6.2.14 at "+addr+"; admitq needs Redis 7.0 or later") {
			t.Errorf("%s: %v", what, r)
			continue
		}
		oneLine(t, what, r.stderr)
	}
	if n := writes(); n != 0 {
		t.Errorf("the fake server got %d commands other than PING, INFO, HELLO and CLIENT", n)
	}
}

// fakeRedis serves just enough RESP2 for a client to connect, PING and
// read INFO, which says version. writes counts every other command.
func fakeRedis(t *testing.T, version string) (addr string, writes func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	others := make(chan struct{}, 1000)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					args, err := readCommand(r)
					if err != nil {
						return
					}
					var reply string
					switch strings.ToUpper(args[0]) {
					case "PING":
						reply = "+PONG\r\n"
					case "INFO":
						info := "# Server\r\nredis_version:" + version + "\r\n# Cluster\r\ncluster_enabled:0\r\n"
						reply = "$" + strconv.Itoa(len(info)) + "\r\n" + info + "\r\n"
					case "HELLO", "CLIENT":
						reply = "-ERR unknown command\r\n"
					default:
						others <- struct{}{}
						reply = "-ERR unknown command\r\n"
					}
					if _, err := io.WriteString(conn, reply); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), func() int { return len(others) }
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("want an array, got %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	args := make([]string, n)
	for i := range args {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(h, "$")))
		if err != nil {
			return nil, fmt.Errorf("bad bulk header %q", h)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// A server without cluster support named with --redis-cluster is named
// for what it is, with the flag to use instead, not as a Redis that
// cannot be reached.
func TestAPlainServerNamedAsAClusterSaysSo(t *testing.T) {
	srv := redistest.Start(t)
	r := admitq(t, "--redis-cluster", srv.Addr(), "quota", "list")
	if r.code != exitFailure || !strings.Contains(r.stderr, "is not a Redis Cluster") || !strings.Contains(r.stderr, "--redis ") ||
		strings.Contains(r.stderr, "cannot reach") {
		t.Errorf("quota list with --redis-cluster on a plain server: %v", r)
	}
	oneLine(t, "plain server as a cluster", r.stderr)
}
