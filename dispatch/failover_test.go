package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// reloadCounter wraps a cluster client and counts the layout reloads asked
// of it.
type reloadCounter struct {
	*redis.ClusterClient
	reloads atomic.Int64
}

func (c *reloadCounter) ReloadState(context.Context) { c.reloads.Add(1) }

// replyErr is a Redis error reply, as go-redis returns one.
type replyErr string

func (r replyErr) Error() string { return string(r) }
func (replyErr) RedisError()     {}

func TestRecoverFromAsksForAReloadOnlyWhenTheRouteMayBeStale(t *testing.T) {
	refused := fmt.Errorf("dispatch: queue %q: %w", "q", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	for _, tc := range []struct {
		desc   string
		err    error
		reload bool
	}{
		{"nil asks nothing", nil, false},
		{"a refused dial asks", refused, true},
		{"a deadline asks", context.DeadlineExceeded, true},
		{"CLUSTERDOWN asks", replyErr("CLUSTERDOWN The cluster is down"), true},
		{"READONLY asks", replyErr("READONLY You can't write against a read only replica."), true},
		{"LOADING asks", replyErr("LOADING Redis is loading the dataset in memory"), true},
		{"a MOVED go-redis gave up following asks", replyErr("MOVED 3999 127.0.0.1:7001"), true},
		{"an ASK go-redis gave up following asks", replyErr("ASK 3999 127.0.0.1:7001"), true},
		{"a script error asks nothing", replyErr("ERR user_script:12: attempt to compare nil"), false},
		{"WRONGTYPE asks nothing", replyErr("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{"OOM asks nothing", replyErr("OOM command not allowed when used memory > 'maxmemory'."), false},
		{"a cancelled call asks nothing", context.Canceled, false},
	} {
		c := &reloadCounter{ClusterClient: redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})}
		d := &Dispatcher{rdb: c}
		if got := d.recoverFrom(tc.err); !errors.Is(got, tc.err) || (got == nil) != (tc.err == nil) {
			t.Errorf("%s: recoverFrom(%v) = %v, want the error itself", tc.desc, tc.err, got)
		}
		if got := c.reloads.Load() == 1; got != tc.reload {
			t.Errorf("%s: %d reloads, want a reload: %v", tc.desc, c.reloads.Load(), tc.reload)
		}
		_ = c.Close()
	}
}

func TestRecoverFromReloadsAtMostEveryInterval(t *testing.T) {
	c := &reloadCounter{ClusterClient: redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})}
	defer c.Close()
	d := &Dispatcher{rdb: c}
	err := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() { _ = d.recoverFrom(err) })
	}
	wg.Wait()
	if n := c.reloads.Load(); n != 1 {
		t.Fatalf("64 failed calls at once asked for %d reloads, want 1", n)
	}
	time.Sleep(reloadEvery)
	_ = d.recoverFrom(err)
	_ = d.recoverFrom(err)
	if n := c.reloads.Load(); n != 2 {
		t.Fatalf("two failed calls %v later asked for %d reloads in all, want 2", reloadEvery, n)
	}
}
