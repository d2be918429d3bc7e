package dispatch

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/admitq/admitq/internal/rediserr"
)

// reloadEvery is the least time between two reloads of a cluster's layout
// that one Dispatcher asks for.
const reloadEvery = 150 * time.Millisecond

// stateReloader is a client that can be told to read its cluster's layout
// again: a *redis.ClusterClient, or a type that embeds one.
type stateReloader interface {
	ReloadState(ctx context.Context)
}

// failover is a Dispatcher's record of the layout reloads it asked for.
// Its zero value is ready for use.
type failover struct {
	asked atomic.Int64 // UnixNano of the last reload asked for
}

// recoverFrom asks d's cluster client to read the cluster's layout again
// when err says the call may have gone to a node that no longer serves its
// slot (rediserr.Misrouted), at most every reloadEvery; it returns err.
//
// go-redis reads the layout every ClusterStateReloadInterval (60 s by
// default), or when a node answers MOVED. A master killed outright answers
// nothing: when its replica takes its slots over, every call on the
// queue's keys (the dispatcher's turns, a producer's Mode and Park, and
// asynq's own, which share the client) still goes to the dead address until
// the next periodic reload, close to a minute. The reload runs in the
// background, so the caller does not wait for it, and go-redis runs one at
// a time.
func (d *Dispatcher) recoverFrom(err error) error {
	if !rediserr.Misrouted(err) {
		return err
	}
	r, ok := d.rdb.(stateReloader)
	if !ok {
		return err
	}
	now := time.Now().UnixNano()
	last := d.failover.asked.Load()
	if now-last < int64(reloadEvery) || !d.failover.asked.CompareAndSwap(last, now) {
		return err
	}
	r.ReloadState(context.Background())
	return err
}
