package admission

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// giveBack removes from the logs, in the background, entries that no one
// will use: fresh IDs (the gate's own, or ones package enqueue made for
// one call) whose caller left before the decision arrived, got an error
// although the script may have run, or released the slot and saw the
// release fail. Such an ID can never be asked for again, so removing it
// late is always safe, and it must be removed, or the slot stays taken
// for nothing until its window passes (a minute's quota, for a minute).
//
// One ZREM that fails is not enough to give up: under load a removal
// sent with the gate's timeout fails as often as the call it cleans up
// after (TestShortDeadlinesLeaveNoSlotWithoutTask kept 16-66 slots, each
// one whose single ZREM timed out, often before it left the process). So
// giveBack keeps the entries until Redis confirms their removal, retrying
// with a backoff while Redis is unavailable, and sends everything waiting
// in one pipeline, one ZREM per key: a flood of abandoned calls costs one
// round trip, not one each. An entry is dropped once its slot has surely
// left the window (then the script drops it), when Redis answers with an
// error (the key is not a log any more), and when the gate closes.
//
// At most maxGiveBack entries wait at once, about 100 bytes each; past
// that new ones are dropped and idle until their windows pass, as every
// one did before. The goroutine runs only while entries wait.
type giveBack struct {
	rdb     redis.UniversalClient
	timeout time.Duration
	// done is told of each tenant whose entries were removed: the
	// gate drops its cached rejection, which a freed slot ends.
	done func(tenant string)

	mu      sync.Mutex
	keys    map[string]*giveBackKey // by log key
	n       int                     // entries waiting
	running bool
	closed  bool
	stop    chan struct{} // closed by close
	wg      sync.WaitGroup
}

type giveBackKey struct {
	tenant string
	until  map[string]time.Time // ID → when its slot surely left the window
}

// maxGiveBack bounds the entries waiting to be removed.
const maxGiveBack = 1 << 16

// giveBackRetryMax caps the wait between attempts while Redis is
// unavailable.
const giveBackRetryMax = time.Second

func newGiveBack(rdb redis.UniversalClient, timeout time.Duration, done func(string)) *giveBack {
	return &giveBack{rdb: rdb, timeout: timeout, done: done, keys: make(map[string]*giveBackKey), stop: make(chan struct{})}
}

// add queues ids of tenant's log key for removal, until (local clock)
// their slots have surely left the window.
func (b *giveBack) add(tenant, key string, ids []string, until time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	k := b.keys[key]
	for _, id := range ids {
		if b.n >= maxGiveBack {
			break
		}
		if k == nil {
			k = &giveBackKey{tenant: tenant, until: make(map[string]time.Time)}
			b.keys[key] = k
		}
		if _, ok := k.until[id]; !ok {
			b.n++
		}
		k.until[id] = until
	}
	if b.n > 0 && !b.running {
		b.running = true
		b.wg.Add(1)
		go b.run()
	}
}

// run removes what waits until nothing does, or the gate closes.
func (b *giveBack) run() {
	defer b.wg.Done()
	backoff := b.timeout / 4
	for {
		batch := b.take()
		if batch == nil {
			return
		}
		if b.attempt(batch) {
			backoff = b.timeout / 4
			continue
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-b.stop:
			t.Stop()
		}
		backoff = min(2*backoff, giveBackRetryMax)
	}
}

// giveBackBatch is what one attempt removes from one key.
type giveBackBatch struct {
	ids []string
}

// take returns a copy of what waits, after dropping the entries whose
// slots have left their windows, or nil, and marks the loop stopped, when
// nothing waits or the gate has closed.
func (b *giveBack) take() map[string]*giveBackBatch {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	batch := make(map[string]*giveBackBatch, len(b.keys))
	for key, k := range b.keys {
		for id, until := range k.until {
			if now.After(until) {
				delete(k.until, id)
				b.n--
				continue
			}
			if batch[key] == nil {
				batch[key] = &giveBackBatch{}
			}
			batch[key].ids = append(batch[key].ids, id)
		}
		if len(k.until) == 0 {
			delete(b.keys, key)
		}
	}
	if len(batch) == 0 || b.closed {
		b.running = false
		return nil
	}
	return batch
}

// attempt sends one ZREM per key of batch in one
// pipeline, forgets the entries Redis answered for, and reports whether
// Redis answered every command. Like every call of the gate, it waits no longer than the
// timeout, whether or not the client honours context deadlines; a
// pipeline it stops waiting for may still land, which is harmless.
func (b *giveBack) attempt(batch map[string]*giveBackBatch) bool {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	pipe := b.rdb.Pipeline()
	keys := make([]string, 0, len(batch))
	cmds := make([]*redis.IntCmd, 0, len(batch))
	for key, kb := range batch {
		keys = append(keys, key)
		members := make([]any, len(kb.ids))
		for i, id := range kb.ids {
			members[i] = id
		}
		cmds = append(cmds, pipe.ZRem(ctx, key, members...))
	}
	exec := make(chan struct{})
	go func() {
		defer close(exec)
		_, _ = pipe.Exec(ctx) // errors are read per command below
	}()
	select {
	case <-exec:
	case <-ctx.Done():
		return false // cmds are still the pipeline's
	}
	var tenants []string
	answered := true
	b.mu.Lock()
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && unavailable(err) {
			answered = false
			continue
		}
		// Removed, or an answer that says it cannot be (a key that is no
		// log any more): either way, done with.
		k := b.keys[keys[i]]
		if k == nil {
			continue
		}
		for _, id := range batch[keys[i]].ids {
			if _, ok := k.until[id]; ok {
				delete(k.until, id)
				b.n--
			}
		}
		if len(k.until) == 0 {
			delete(b.keys, keys[i])
		}
		tenants = append(tenants, k.tenant)
	}
	b.mu.Unlock()
	for _, t := range tenants {
		b.done(t)
	}
	return answered
}

// close stops the loop and waits for it; entries still waiting are
// dropped, and idle until their windows pass.
func (b *giveBack) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.stop)
	}
	b.mu.Unlock()
	b.wg.Wait()
}
