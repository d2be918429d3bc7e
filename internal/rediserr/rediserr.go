// Package rediserr classifies the errors of Redis calls for admitq's
// packages, which must tell a Redis that could not serve a call from one
// that answered it, and an answer that wrote nothing from one that may have.
package rediserr

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Class is what an error says about the call that returned it.
type Class int

const (
	// None is the class of a nil error.
	None Class = iota
	// Down: Redis could not be reached or did not answer in time (a
	// network error, a deadline, a closed client or pool). The command may
	// or may not have run.
	Down
	// Busy: an error reply saying the server cannot serve now (LOADING,
	// READONLY, CLUSTERDOWN, MASTERDOWN, TRYAGAIN, BUSY). The command did
	// not run.
	Busy
	// OOM: an error reply refusing a command that may grow memory while
	// the server is over maxmemory. The command did not run: Redis checks
	// memory before a command, and inside a script only before the
	// script's first write, so the script stopped before writing anything.
	OOM
	// Reply: any other error reply (WRONGTYPE, ERR, a script's own
	// error). Redis served the call.
	Reply
	// Other: anything else, such as the caller's context being cancelled.
	Other
)

// busyPrefixes start the error replies of a server that cannot serve now.
var busyPrefixes = [...]string{"LOADING", "READONLY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "BUSY"}

// Classify returns err's class. A network or context deadline error wins
// over a Redis reply that err may also wrap.
func Classify(err error) Class {
	if err == nil {
		return None
	}
	var nerr net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &nerr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, redis.ErrPoolTimeout) {
		return Down
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) || errors.Is(err, context.Canceled) {
		return Other
	}
	msg := rerr.Error()
	for _, p := range busyPrefixes {
		if strings.HasPrefix(msg, p) {
			return Busy
		}
	}
	if strings.HasPrefix(msg, "OOM ") {
		return OOM
	}
	return Reply
}

// Unavailable reports whether err means Redis could not serve the call
// now: Down or Busy. Anything else, such as a wrong key type, a script
// error or an OOM refusal, is an answer, not an outage.
func Unavailable(err error) bool {
	c := Classify(err)
	return c == Down || c == Busy
}

// Answered reports whether err is an error reply from a Redis that served
// the call or refused it for itself (Reply or OOM), not one that could not
// serve it.
func Answered(err error) bool {
	c := Classify(err)
	return c == Reply || c == OOM
}

// IsReply reports whether err holds any Redis error reply (Busy, OOM or
// Reply), not a network, timeout or context error: the server answered
// this very command.
func IsReply(err error) bool {
	c := Classify(err)
	return c == Busy || c == OOM || c == Reply
}

// IsOOM reports whether err is Redis's OOM reply.
func IsOOM(err error) bool { return Classify(err) == OOM }

// Misrouted reports whether err may mean that a cluster client sent the
// call to a node that no longer serves its slot, so that its view of the
// cluster is worth reading again: Redis was unavailable (Down or Busy: the
// node is dead, or a replica not yet promoted, or a demoted master that
// answers READONLY), or a MOVED or ASK redirect outlived the client's
// redirects (a reply a cluster client follows by itself).
func Misrouted(err error) bool {
	if Unavailable(err) {
		return true
	}
	var rerr redis.Error
	if Classify(err) != Reply || !errors.As(err, &rerr) {
		return false
	}
	msg := rerr.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}
