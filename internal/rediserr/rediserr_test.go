package rediserr_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/rediserr"
)

// reply is a Redis error reply, as go-redis returns one.
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		desc string
		err  error
		want rediserr.Class
	}{
		{"nil is none", nil, rediserr.None},
		{"a deadline is down", context.DeadlineExceeded, rediserr.Down},
		{"a refused dial is down", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, rediserr.Down},
		{"EOF is down", io.EOF, rediserr.Down},
		{"a closed client is down", redis.ErrClosed, rediserr.Down},
		{"a pool timeout is down", redis.ErrPoolTimeout, rediserr.Down},
		{"LOADING is busy", reply("LOADING Redis is loading the dataset in memory"), rediserr.Busy},
		{"READONLY is busy", reply("READONLY You can't write against a read only replica."), rediserr.Busy},
		{"BUSY is busy", reply("BUSY Redis is busy running a script."), rediserr.Busy},
		{"CLUSTERDOWN is busy", reply("CLUSTERDOWN The cluster is down"), rediserr.Busy},
		{"OOM is its own class", reply("OOM command not allowed when used memory > 'maxmemory'."), rediserr.OOM},
		{"wrapped OOM too", fmt.Errorf("admit: %w", reply("OOM command not allowed when used memory > 'maxmemory'.")), rediserr.OOM},
		{"WRONGTYPE is a reply", reply("WRONGTYPE Operation against a key holding the wrong kind of value"), rediserr.Reply},
		{"a script error is a reply", reply("ERR user_script:1: boom"), rediserr.Reply},
		{"a reply and a deadline together are down", errors.Join(reply("ERR x"), context.DeadlineExceeded), rediserr.Down},
		{"a reply and a cancel together are other", errors.Join(reply("ERR x"), context.Canceled), rediserr.Other},
		{"cancel is other", context.Canceled, rediserr.Other},
		{"plain text is other", errors.New("OOM command not allowed"), rediserr.Other},
	} {
		if got := rediserr.Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %d, want %d", tc.desc, tc.err, got, tc.want)
		}
	}
}

func TestPredicates(t *testing.T) {
	oom := reply("OOM command not allowed when used memory > 'maxmemory'.")
	loading := reply("LOADING")
	wrong := reply("WRONGTYPE x")
	for _, tc := range []struct {
		desc                                  string
		err                                   error
		unavailable, answered, isReply, isOOM bool
	}{
		{"nil", nil, false, false, false, false},
		{"down", context.DeadlineExceeded, true, false, false, false},
		{"busy", loading, true, false, true, false},
		{"oom", oom, false, true, true, true},
		{"reply", wrong, false, true, true, false},
		{"other", context.Canceled, false, false, false, false},
	} {
		got := [4]bool{rediserr.Unavailable(tc.err), rediserr.Answered(tc.err), rediserr.IsReply(tc.err), rediserr.IsOOM(tc.err)}
		if want := [4]bool{tc.unavailable, tc.answered, tc.isReply, tc.isOOM}; got != want {
			t.Errorf("%s: Unavailable, Answered, IsReply, IsOOM = %v, want %v", tc.desc, got, want)
		}
	}
}

func TestMisrouted(t *testing.T) {
	for _, tc := range []struct {
		desc string
		err  error
		want bool
	}{
		{"nil is not", nil, false},
		{"a refused dial is", fmt.Errorf("dispatch: %w", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}), true},
		{"EOF is", io.EOF, true},
		{"a deadline is", context.DeadlineExceeded, true},
		{"CLUSTERDOWN is", reply("CLUSTERDOWN The cluster is down"), true},
		{"READONLY is", reply("READONLY You can't write against a read only replica."), true},
		{"LOADING is", reply("LOADING Redis is loading the dataset in memory"), true},
		{"a MOVED the client gave up on is", fmt.Errorf("dispatch: %w", reply("MOVED 3999 127.0.0.1:6381")), true},
		{"an ASK the client gave up on is", reply("ASK 3999 127.0.0.1:6381"), true},
		{"OOM is not", reply("OOM command not allowed when used memory > 'maxmemory'."), false},
		{"a script error naming MOVED is not", reply("ERR user_script:1: MOVED 1 x"), false},
		{"WRONGTYPE is not", reply("WRONGTYPE x"), false},
		{"cancel is not", context.Canceled, false},
		{"plain text MOVED is not", errors.New("MOVED 3999 127.0.0.1:6381"), false},
	} {
		if got := rediserr.Misrouted(tc.err); got != tc.want {
			t.Errorf("%s: Misrouted(%v) = %v, want %v", tc.desc, tc.err, got, tc.want)
		}
	}
}
