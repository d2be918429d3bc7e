package admission

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/rediserr"
	"github.com/admitq/admitq/lua"
)

// causeMaxAge is how old a network error may be and still explain a call
// that found Redis unavailable. While Redis refuses connections, go-redis
// and the breaker's probe keep dialing, so the error stays fresh.
const causeMaxAge = 5 * time.Second

// causes remembers the last network error that a Redis client's dials and
// commands met. A call that gives up at its deadline sees only "context
// deadline exceeded", while the reason (a refused connection, an unknown
// host) lies in a dial that go-redis retried in the background; causes lets
// the ErrUnavailable error name it. It is a redis.Hook, added to the client
// by the first New or NewRedisQuotas on it (see watchCauses); it costs
// nothing until a call fails.
type causes struct {
	last atomic.Pointer[cause]
}

type cause struct {
	err error
	at  time.Time
}

// watchCauses returns rdb's causes hook, which it adds the first time.
// Every Gate and RedisQuotas on one client shares it: go-redis cannot
// remove a hook, and a hook of its own for each would lengthen every
// command's chain of hooks for as long as the client lives, one more for
// each Gate ever made on it. A client of another type gets a hook of its
// own each time.
func watchCauses(rdb redis.UniversalClient) *causes {
	switch cl := rdb.(type) {
	case *redis.Client:
		return sharedCauses(cl, rdb)
	case *redis.ClusterClient:
		return sharedCauses(cl, rdb)
	case *redis.Ring:
		return sharedCauses(cl, rdb)
	}
	c := &causes{}
	c.watch(rdb)
	return c
}

// watched holds each client's causes hook, by a weak pointer to the client
// (any holding a weak.Pointer[T]), until the client is collected.
var watched sync.Map

// sharedCauses returns the causes hook of the client p, which is rdb,
// adding it the first time.
func sharedCauses[T any](p *T, rdb redis.UniversalClient) *causes {
	if p == nil {
		return &causes{}
	}
	key := weak.Make(p)
	if c, ok := watched.Load(key); ok {
		return c.(*causes)
	}
	c := &causes{}
	if prev, loaded := watched.LoadOrStore(key, c); loaded {
		return prev.(*causes)
	}
	runtime.AddCleanup(p, func(key weak.Pointer[T]) { watched.Delete(key) }, key)
	c.watch(rdb)
	return c
}

// watch adds c to rdb, and on a cluster to each node client it makes. It
// adds lua.FlagFallback too, once per client as c is, so that the scripts
// run on a server that does not know script flags (miniredis).
func (c *causes) watch(rdb redis.UniversalClient) {
	if rdb == nil {
		return
	}
	rdb.AddHook(c)
	rdb.AddHook(lua.FlagFallback())
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		// A cluster client's own hooks see a command's last error, not the
		// dials of the node clients it makes, where a refusal shows.
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(c) })
	}
}

// record keeps err if it is a network error, not the caller's context.
func (c *causes) record(err error) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	var nerr net.Error
	if !errors.As(err, &nerr) && !unavailable(err) {
		return // an answer from Redis, not a reason it could not answer
	}
	c.last.Store(&cause{err: err, at: time.Now()})
}

// DialHook implements redis.Hook.
func (c *causes) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			c.record(err)
		}
		return conn, err
	}
}

// ProcessHook implements redis.Hook.
func (c *causes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil {
			c.record(err)
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *causes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil {
			c.record(err)
		}
		return err
	}
}

// explain adds the last network error, if there is a recent one, to err
// when err wraps ErrUnavailable without saying why: it ran out of time, or
// the breaker is open. The result still matches everything err matched,
// and the cause too (errors.Is(err, syscall.ECONNREFUSED), say).
func (c *causes) explain(err error) error {
	if c == nil || err == nil || !errors.Is(err, ErrUnavailable) {
		return err
	}
	var nerr net.Error
	if errors.As(err, &nerr) && !nerr.Timeout() {
		return err // it names its cause already
	}
	last := c.last.Load()
	if last == nil || time.Since(last.at) > causeMaxAge {
		return err
	}
	return &causedError{err: err, cause: last.err}
}

// causedError is an ErrUnavailable error with the network error behind it.
type causedError struct {
	err, cause error
}

func (e *causedError) Error() string {
	return e.err.Error() + " (last error: " + e.cause.Error() + ")"
}

func (e *causedError) Unwrap() []error { return []error{e.err, e.cause} }

// unavailable reports whether err means Redis could not serve the call now
// (rediserr.Unavailable): an OOM refusal, a wrong key type or a script
// error is an answer, not an outage.
func unavailable(err error) bool { return rediserr.Unavailable(err) }

// isReply reports whether err is an error reply from Redis that says it
// served the call or refused it for itself (rediserr.Answered).
func isReply(err error) bool { return rediserr.Answered(err) }

// outOfMemory reports whether err is Redis's OOM refusal: the server's
// state, not the call's, so splitting the call would only repeat it.
func outOfMemory(err error) bool { return rediserr.IsOOM(err) }
