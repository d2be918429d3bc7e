package admission

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// breaker stops the gate paying the Redis timeout on every call while Redis
// is down. After threshold consecutive calls fail as unavailable it opens:
// calls skip Redis (FailClosed errors at once, FailOpen decides locally)
// while one goroutine probes Redis every probeEvery. The first probe that
// succeeds closes it, so the gate is back on Redis within probeEvery of
// Redis answering again.
type breaker struct {
	threshold  int64
	probeEvery time.Duration
	timeout    time.Duration
	probe      func(context.Context) error
	onOpen     func() // when set, called as the breaker opens
	onTick     func() // when set, called every probeEvery while open, probe out or not
	logger     *slog.Logger

	failures    atomic.Int64
	open        atomic.Bool
	lastFailure time.Time // guarded by mu

	mu      sync.Mutex
	stop    chan struct{} // closed by Close
	stopped bool
	probing sync.WaitGroup
}

func newBreaker(probe func(context.Context) error, timeout time.Duration, logger *slog.Logger) *breaker {
	return &breaker{
		threshold:  3,
		probeEvery: 200 * time.Millisecond,
		timeout:    timeout,
		probe:      probe,
		logger:     logger,
		stop:       make(chan struct{}),
	}
}

// isOpen reports whether calls should skip Redis.
func (b *breaker) isOpen() bool { return b.open.Load() }

// success records a call Redis answered.
func (b *breaker) success() {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
}

// failure records a call, started at started, that found Redis
// unavailable. Calls that overlap a failure already counted count with it:
// one slow round trip that times out 64 waiting callers is one failure,
// not 64, and opens nothing by itself.
func (b *breaker) failure(err error, started time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if started.Before(b.lastFailure) {
		return
	}
	b.lastFailure = time.Now()
	if b.failures.Add(1) < b.threshold || !b.open.CompareAndSwap(false, true) || b.stopped {
		return
	}
	b.logger.Warn("admitq: redis unavailable, breaker open", "err", err)
	if b.onOpen != nil {
		b.onOpen()
	}
	b.probing.Add(1)
	go b.probeLoop()
}

func (b *breaker) probeLoop() {
	defer b.probing.Done()
	t := time.NewTicker(b.probeEvery)
	defer t.Stop()
	// The probe runs apart from this loop, so that Close never waits on
	// it: go-redis honours a context's deadline on the socket only with
	// ContextTimeoutEnabled, and otherwise a probe of a Redis that accepts
	// connections but never answers (a frozen process, a partition) blocks
	// for the client's ReadTimeout, seconds. A probe still out when the
	// next tick comes is left to finish; one at a time, so that they never
	// pile up on the client's pool.
	result := make(chan error, 1)
	inFlight := false
	for {
		select {
		case <-b.stop:
			return // a probe still out ends with the client's timeouts, or its Close
		case err := <-result:
			inFlight = false
			if err == nil {
				b.failures.Store(0)
				b.open.Store(false)
				b.logger.Info("admitq: redis answers again, breaker closed")
				return
			}
		case <-t.C:
			if b.onTick != nil {
				b.onTick()
			}
			if !inFlight {
				inFlight = true
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
					defer cancel()
					result <- b.probe(ctx)
				}()
			}
		}
	}
}

// close stops the probe loop and waits for it, but not for a probe call
// still out (see probeLoop).
func (b *breaker) close() {
	b.mu.Lock()
	if !b.stopped {
		b.stopped = true
		close(b.stop)
	}
	b.mu.Unlock()
	b.probing.Wait()
}

// nodeBreakers keeps one breaker per cluster master, so that one master
// down opens no breaker for the tenants of the others. A nil *nodeBreakers
// (no cluster) has none.
//
// A master's breaker probes the master that now serves one of its keys,
// not a fixed address: when a master dies its replica takes its slots over
// under another address, and the probe sees that as soon as the client's
// cluster layout does. go-redis reloads its layout only every
// ClusterStateReloadInterval (60 s by default) or on a MOVED reply, which
// no call gets while the breaker is open; so the breaker asks for a reload
// when it opens and every probe interval (200 ms) while open. Breakers of nodes that no longer serve
// their keys (gone, or replicas now) are forgotten.
type nodeBreakers struct {
	cc      *redis.ClusterClient
	timeout time.Duration
	logger  *slog.Logger
	causes  *causes // added to each master's client that lacks it (causes.watchNode)

	mu     sync.Mutex
	m      map[string]*nodeBreaker
	closed bool

	swept     atomic.Int64 // UnixNano of the last sweep
	reloading atomic.Bool  // a reload of reload's own is out
}

// sweepEvery is how often the breakers are checked against the client's
// layout, besides whenever a breaker is made or probes.
const sweepEvery = time.Second

// nodeBreaker is one master's breaker, with a key the master served when
// the breaker was made: the probe asks the key's master, and a breaker
// whose key has moved elsewhere belongs to no master any more.
type nodeBreaker struct {
	*breaker
	addr string
	key  string
}

// master returns the client of the master that serves key, as the
// cluster client's view has it, or nil when that master is not known yet
// (or n is, off a cluster).
func (n *nodeBreakers) master(ctx context.Context, key string) *redis.Client {
	if n == nil {
		return nil
	}
	node, err := n.cc.MasterForKey(ctx, key)
	if err != nil {
		return nil
	}
	return node
}

// of returns the breaker of node (nil: none), the master that serves key.
func (n *nodeBreakers) of(ctx context.Context, node *redis.Client, key string) *breaker {
	if node == nil {
		return nil
	}
	addr := node.Options().Addr
	n.mu.Lock()
	defer n.mu.Unlock()
	if last := n.swept.Load(); time.Since(time.Unix(0, last)) > sweepEvery && n.swept.CompareAndSwap(last, time.Now().UnixNano()) {
		n.sweepLocked(ctx)
	}
	nb := n.m[addr]
	if nb == nil {
		nb = &nodeBreaker{addr: addr, key: key}
		nb.breaker = newBreaker(n.probe(nb), n.timeout, n.logger.With("node", addr))
		nb.onOpen = n.reload
		// On every tick, even while a probe of a dead address is still
		// out (go-redis retries its dials): the tenants' calls follow the
		// layout, not this breaker.
		nb.onTick = n.reload
		if n.closed {
			nb.close()
		}
		n.m[addr] = nb
		n.causes.watchNode(node)
		n.sweepLocked(ctx)
	}
	return nb.breaker
}

// reload asks go-redis to read the cluster layout again, in the
// background and at most every 200 ms however often it is asked. go-redis
// reads it from one node, picked at random, and tries the next only once
// that one has failed: a dead address costs its dial retries (DialerRetries,
// about 2 s on loopback), and a single reload that picks it first holds
// everything up for that long. So each call also starts a reload of its
// own, one at a time, that gives up after the timeout: each of these picks
// afresh, and one soon starts with a live node.
func (n *nodeBreakers) reload() {
	n.cc.ReloadState(context.Background())
	if !n.reloading.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer n.reloading.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), n.timeout)
		defer cancel()
		// ForEachMaster reads the layout anew before it calls anything.
		_ = n.cc.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
	}()
}

// probe returns nb's probe: nil once its key's master answers, or once its
// key is served by another node (a replica took over, or the slot moved),
// whose own breaker then decides; an error while the master that serves
// the key cannot. A keyed command rather than PING: a master that answers
// PING may still refuse keys (CLUSTERDOWN while another master is down).
func (n *nodeBreakers) probe(nb *nodeBreaker) func(context.Context) error {
	return func(ctx context.Context) error {
		node, err := n.cc.MasterForKey(ctx, nb.key)
		if err != nil {
			return err
		}
		if node.Options().Addr != nb.addr {
			n.mu.Lock()
			n.sweepLocked(ctx)
			n.mu.Unlock()
			return nil
		}
		if err := node.Exists(ctx, nb.key).Err(); err != nil && unavailable(err) {
			return err
		}
		return nil // an answer, even MOVED: the master is up
	}
}

// sweepLocked forgets the breakers of nodes that no longer serve their
// keys, as far as the client's current layout knows, and stops their
// probes. It costs a slot lookup per known master, no round trip.
func (n *nodeBreakers) sweepLocked(ctx context.Context) {
	for addr, nb := range n.m {
		node, err := n.cc.MasterForKey(ctx, nb.key)
		if err != nil || node.Options().Addr == addr {
			continue
		}
		delete(n.m, addr)
		nb.open.Store(false) // a caller still holding it goes to Redis, which routes anew
		go nb.close()        // not here: close waits for the probe loop, which may be waiting on n.mu
	}
}

func (n *nodeBreakers) close() {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.closed = true
	bs := make([]*nodeBreaker, 0, len(n.m))
	for _, b := range n.m {
		bs = append(bs, b)
	}
	n.mu.Unlock()
	for _, b := range bs {
		b.close()
	}
}
