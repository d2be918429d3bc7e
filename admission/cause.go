package admission

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

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
// by the first New or NewRedisQuotas on it (see watchCauses); until a call
// fails it costs a comparison of each command's name.
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
// each Gate ever made on it. The client itself says whether it has one
// (findCauses): nothing in the package remembers clients. Two made on one
// client at the same moment may each add one, which is harmless. A client
// of a type other than go-redis's own three gets a hook of its own each
// time.
func watchCauses(rdb redis.UniversalClient) *causes {
	switch cl := rdb.(type) {
	case *redis.Client:
		if cl == nil {
			return &causes{}
		}
	case *redis.ClusterClient:
		if cl == nil {
			return &causes{}
		}
	case *redis.Ring:
		if cl == nil {
			return &causes{}
		}
	default:
		c := &causes{}
		c.watch(rdb)
		return c
	}
	if c := findCauses(rdb); c != nil {
		return c
	}
	c := &causes{}
	c.watch(rdb)
	return c
}

// probeCommand names the command findCauses sends through a client's
// hooks. It never reaches Redis.
const probeCommand = "admitq-causes-probe"

// causesProbe asks the causes hooks of a client's chain to name
// themselves, as a context value of a probeCommand.
type causesProbe struct {
	found []*causes
	// all lets the probe go on past the first causes hook, down the
	// whole chain, to count them (for tests).
	all bool
}

type causesProbeKey struct{}

// findCauses returns the causes hook already on rdb, or nil.
func findCauses(rdb redis.UniversalClient) *causes {
	p := &causesProbe{}
	probeCauses(rdb, p)
	if len(p.found) == 0 {
		return nil
	}
	return p.found[0]
}

// probeCauses sends rdb a probeCommand carrying p, with a context
// cancelled before it is sent. A causes hook answers it and, unless p.all
// is set, stops it there; on a client without one the command fails in
// go-redis on its cancelled context before a connection is taken, so it
// never reaches Redis. Hooks added to the client before any causes hook
// see it go by.
func probeCauses(rdb redis.UniversalClient, p *causesProbe) {
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), causesProbeKey{}, p))
	cancel()
	_ = rdb.Process(ctx, redis.NewCmd(ctx, probeCommand))
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

// watchNode adds c to node, a cluster master's client, unless it has a
// causes hook already. watch has the cluster client add c to each node
// client it makes from then on, but not to those it made before: the
// seeds' clients, which findCauses's probe itself makes when it finds no
// hook. A gate calls this for each master the first time it routes to
// it, so that a master's refused dials explain its tenants' errors.
func (c *causes) watchNode(node *redis.Client) {
	if c == nil || node == nil {
		return
	}
	if findCauses(node) == nil {
		node.AddHook(c)
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

// ProcessHook implements redis.Hook. It also answers findCauses's probe.
func (c *causes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == probeCommand {
			if p, ok := ctx.Value(causesProbeKey{}).(*causesProbe); ok {
				p.found = append(p.found, c)
				if !p.all {
					return nil
				}
			}
		}
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

// busy reports whether err is a reply from a Redis that cannot serve the
// call now (rediserr.Busy): LOADING, CLUSTERDOWN, TRYAGAIN and the like.
func busy(err error) bool { return rediserr.Classify(err) == rediserr.Busy }

// isReply reports whether err is an error reply from Redis that says it
// served the call or refused it for itself (rediserr.Answered).
func isReply(err error) bool { return rediserr.Answered(err) }

// outOfMemory reports whether err is Redis's OOM refusal: the server's
// state, not the call's, so splitting the call would only repeat it.
func outOfMemory(err error) bool { return rediserr.IsOOM(err) }
