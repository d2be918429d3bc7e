package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNoRedisServer is returned by Run when Config.Redis is nil and there is
// no redis-server on PATH to start a throwaway one.
var ErrNoRedisServer = errors.New("bench: redis-server is not on PATH")

// startRedis starts a throwaway redis-server on a free loopback port, with
// no persistence, and waits until it answers. stop kills it and removes its
// directory. The server is the bench's own, so it may be flushed at will.
func startRedis(ctx context.Context) (addr string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("%w (on Debian or Ubuntu: apt-get install redis-server)", ErrNoRedisServer)
	}
	dir, err := os.MkdirTemp("", "admitq-bench-redis-")
	if err != nil {
		return "", nil, err
	}
	// Another process may take the port between our probe and the bind;
	// try a few.
	for range 5 {
		var kill func()
		addr, kill, err = launchRedis(ctx, bin, dir, nil)
		if err == nil {
			return addr, func() { kill(); os.RemoveAll(dir) }, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	os.RemoveAll(dir)
	return "", nil, err
}

// launchRedis starts one redis-server in dir with extra arguments after the
// bench's own, and waits until it answers PING.
func launchRedis(ctx context.Context, bin, dir string, extra []string) (string, func(), error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	logFile := dir + "/redis-server.log"
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", logFile,
	}
	cmd := exec.Command(bin, append(args, extra...)...)
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("bench: start redis-server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}

	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logFile)
			return "", nil, fmt.Errorf("bench: redis-server on %s exited (%v): %s", addr, err, lastLines(string(log), 5))
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err == nil {
			return addr, stop, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("bench: redis-server on %s did not answer: %w", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
