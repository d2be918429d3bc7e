package admission

import (
	"context"
	"github.com/redis/go-redis/v9"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
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

// nodeBreakers keeps one breaker per cluster master, each probing its own
// master. A nil *nodeBreakers (no cluster) has none.
type nodeBreakers struct {
	cc      *redis.ClusterClient
	timeout time.Duration
	logger  *slog.Logger

	mu     sync.Mutex
	m      map[string]*breaker
	closed bool
}

// of returns the breaker of the master that serves key, or nil when that
// master is not known yet.
func (n *nodeBreakers) of(ctx context.Context, key string) *breaker {
	if n == nil {
		return nil
	}
	node, err := n.cc.MasterForKey(ctx, key)
	if err != nil {
		return nil
	}
	addr := node.Options().Addr
	n.mu.Lock()
	defer n.mu.Unlock()
	b := n.m[addr]
	if b == nil {
		b = newBreaker(func(ctx context.Context) error { return node.Ping(ctx).Err() }, n.timeout, n.logger.With("node", addr))
		if n.closed {
			b.close()
		}
		n.m[addr] = b
	}
	return b
}

func (n *nodeBreakers) close() {
	if n == nil {
		return
	}
	n.mu.Lock()
	n.closed = true
	bs := make([]*breaker, 0, len(n.m))
	for _, b := range n.m {
		bs = append(bs, b)
	}
	n.mu.Unlock()
	for _, b := range bs {
		b.close()
	}
}
