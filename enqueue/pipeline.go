package enqueue

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/rediserr"
	"github.com/admitq/admitq/lua"
)

// Group commit of asynq's writes. asynq writes each task with one script
// call (EVALSHA) and waits for its reply, so at 64 concurrent producers
// Redis and the producer each pay a read and a write system call per task,
// more than the script itself costs. A Client made by NewFromRedis gives
// its asynq.Client a pipelined client instead, which sends the script calls
// that are waiting when a pipeline is free as one pipeline.
//
// Small pipelines, more than one in flight, keep Redis and the producer
// busy at once: while Redis runs one pipeline the producer encodes the
// next. Long ones leave each side idle while the other works, and each
// pipeline costs both sides a read and a write, so not too many either.
// Measured side by side with admitq bench (64 callers, 1000 tenants, 2
// cores), Enqueue first reached 0.82-0.88x of bare asynq's throughput with
// batches of 8 to 32 and 2 to 8 pipelines, 16 and 4 at the top; go-redis's
// autopipeliner at its defaults (200 commands, one batch at a time) reached
// 0.72-0.75x, and without group commit Enqueue reaches 0.64x. Later, with
// the gate's own group commit in front, 4 pipelines of up to 16 carried
// about 5 writes each (0.29 Redis reads per Enqueue, gate included) and 2
// of up to 32 about 9 (0.21): 0.95-0.98x of bare asynq in three runs, where
// 4 of 16 gave 0.69-1.35x on the same loaded machine.
const (
	pipelineBatch  = 32
	pipelineFlight = 2
)

// pipelined is the redis.UniversalClient that a Client made by NewFromRedis
// gives its asynq.Client. Its script calls (EVALSHA, and the EVAL asynq
// falls back to when Redis has lost the script) are asynq's writes of
// tasks, and it sends them so that the Client knows whether each was sent
// at all (writeTrace):
//
//   - A call whose ctx is done before it is sent is never sent, and fails
//     with the ctx's error: its task was certainly not written.
//   - A call that is sent runs on a context of its own, which keeps the
//     caller's deadline but never a passed one: it gets at least sendGrace
//     to go out, so that go-redis never fails it, unsent, for a deadline
//     that passed while it waited its turn. Its caller then waits for the
//     reply, and learns whether the task was written; once its own ctx has
//     ended, for replyGrace at most, after which the write's fate is open
//     (IsAmbiguous) and the call fails with ctx's error.
//
// Batched (the default), EVALSHA calls share pipelines: those waiting when
// a pipeline is free go out together. A call that finds no pipeline out
// sends its own from its caller's goroutine when the caller's ctx cannot
// end, which saves a lone producer a goroutine's hand-off each way. The
// dispatcher's parks (FCALL) share them too, traced only when they write
// their task (along.go). Every other
// command goes to the client it wraps, as it is: asynq's SADD of a new
// queue's name, before its write.
type pipelined struct {
	redis.UniversalClient
	direct    bool // WithBatching(false): each call goes out alone, at once
	maxBatch  int
	maxFlight int

	// parks are the SHA1s of the dispatcher's park as a script, which
	// goes through here where Redis has no functions (traces).
	parks map[string]bool

	mu       sync.Mutex
	pending  []*scriptCall
	inflight int

	// calls holds spent scriptCalls, for the next: a call and its channel
	// are two allocations per task otherwise.
	calls sync.Pool
}

func newPipelined(rdb redis.UniversalClient) *pipelined {
	park := lua.FairPark()
	return &pipelined{UniversalClient: rdb, maxBatch: pipelineBatch, maxFlight: pipelineFlight,
		parks: map[string]bool{park.Flagged.Hash(): true, park.Plain.Hash(): true}}
}

// traces reports whether a call of ctx, to script sha (its SHA1) or to
// function fn, is a write of the task to trace: asynq's script, or the
// dispatcher's park (a function, or a script where Redis has no
// functions) when it writes the task along (along.go), not alone.
func (p *pipelined) traces(ctx context.Context, sha, fn string) bool {
	if fn != "" || p.parks[sha] {
		return writesAlong(ctx)
	}
	return true
}

// sendNow sends one call of ctx (name, then a script's SHA1 or a
// function's name) at once (send, on sendContext), and records it in
// ctx's writeTrace if traced. A caller whose ctx can end waits for the
// reply as call does: at most replyGrace once ctx has ended.
func sendNow(ctx context.Context, traced bool, name, script string, send func(context.Context) *redis.Cmd) *redis.Cmd {
	if traced {
		traceSent(ctx)
	}
	sctx, cancel := sendContext(ctx)
	run := func() *redis.Cmd {
		defer cancel()
		cmd := send(sctx)
		if traced {
			traceOOM(ctx, cmd)
		}
		return cmd
	}
	if ctx.Done() == nil {
		return run()
	}
	reply := make(chan *redis.Cmd, 1)
	go func() { reply <- run() }()
	return awaitReply(ctx, reply, name, script)
}

// awaitReply waits for a sent call's reply, or once ctx has ended, for
// replyGrace more at most (noReply).
func awaitReply(ctx context.Context, reply <-chan *redis.Cmd, name, script string) *redis.Cmd {
	select {
	case cmd := <-reply:
		return cmd
	case <-ctx.Done():
	}
	if cmd, ok := withinGrace(reply); ok {
		return cmd
	}
	return noReply(ctx, name, script)
}

// sendGrace is the least time a script call has to go out once it is
// sent: a deadline that passes while a call waits for its pipeline or for
// a connection would make go-redis fail it before it writes anything, and
// the Client could not tell that failure from one after the write.
const sendGrace = time.Second

// sendContext returns the context a script call of ctx is sent on: ctx's
// values and deadline, but no earlier than sendGrace from now, and not
// cancelled with ctx.
func sendContext(ctx context.Context) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		return context.WithDeadline(base, later(d, time.Now().Add(sendGrace)))
	}
	return base, func() {}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Eval is asynq's fallback when Redis has lost its script (NOSCRIPT): the
// EVALSHA before it was sent, so this goes out too, whatever ctx.
func (p *pipelined) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	sum := sha1.Sum([]byte(script))
	sha := hex.EncodeToString(sum[:])
	return sendNow(ctx, p.traces(ctx, sha, ""), "eval", sha, func(sctx context.Context) *redis.Cmd {
		return p.UniversalClient.Eval(sctx, script, keys, args...)
	})
}

// Script call states: the caller who leaves and the pipeline that sends
// the call race once, so that a call is never sent after its caller left.
const (
	queued int32 = iota
	sent
	gone
)

type scriptCall struct {
	ctx context.Context
	sha string
	// fn, when set, names a function to call (FCALL) instead: the
	// dispatcher's park, which is not a write of asynq's to trace unless
	// it writes its task along (along.go).
	fn string
	// traced: a write of the task, whose sending and OOM refusal the
	// call's writeTrace records.
	traced bool
	keys   []string
	args   []any
	state  atomic.Int32
	// done gets one value once cmd holds the reply. It is buffered, so
	// that the pipeline never waits for the caller, and never closed, so
	// that the call can be used again once its caller has the reply.
	done chan struct{}
	cmd  *redis.Cmd
}

// newCall returns a queued call, from the pool when there is one.
func (p *pipelined) newCall(ctx context.Context, sha, fn string, keys []string, args []any) *scriptCall {
	c, _ := p.calls.Get().(*scriptCall)
	if c == nil {
		c = &scriptCall{done: make(chan struct{}, 1)}
	}
	c.ctx, c.sha, c.fn, c.keys, c.args = ctx, sha, fn, keys, args
	c.traced = p.traces(ctx, sha, fn)
	c.state.Store(queued)
	return c
}

// reply returns c's reply and puts c back in the pool: its caller has
// received from done, so the pipeline that sent it is done with it.
func (p *pipelined) reply(c *scriptCall) *redis.Cmd {
	cmd := c.cmd
	*c = scriptCall{done: c.done}
	p.calls.Put(c)
	return cmd
}

// EvalSha sends the call, in the next free pipeline unless direct, and
// waits for its reply; or, if ctx ends before it is sent, for ctx.
func (p *pipelined) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return unsent(ctx, "evalsha", sha, err)
	}
	if a := alongOf(ctx); a != nil {
		return a.write(ctx, keys, args) // along.go
	}
	if p.direct {
		return sendNow(ctx, p.traces(ctx, sha, ""), "evalsha", sha, func(sctx context.Context) *redis.Cmd {
			return p.UniversalClient.EvalSha(sctx, sha, keys, args...)
		})
	}
	return p.call(p.newCall(ctx, sha, "", keys, args))
}

// FCall sends a function call (the dispatcher's park) as EvalSha sends a
// script call, sharing its pipelines: concurrent producers' parks and
// writes go out together.
func (p *pipelined) FCall(ctx context.Context, fn string, keys []string, args ...any) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return unsent(ctx, "fcall", fn, err)
	}
	if p.direct {
		return sendNow(ctx, p.traces(ctx, "", fn), "fcall", fn, func(sctx context.Context) *redis.Cmd {
			return p.UniversalClient.FCall(sctx, fn, keys, args...)
		})
	}
	return p.call(p.newCall(ctx, "", fn, keys, args))
}

// call queues c for the next free pipeline and waits for its reply; or, if
// its ctx ends before it is sent, for ctx.
func (p *pipelined) call(c *scriptCall) *redis.Cmd {
	ctx := c.ctx
	p.mu.Lock()
	p.pending = append(p.pending, c)
	start := p.inflight < p.maxFlight
	if start {
		p.inflight++
	}
	alone := start && p.inflight == 1
	p.mu.Unlock()
	switch {
	case alone && ctx.Done() == nil:
		// No pipeline is out, and the caller waits for the reply however
		// long it takes: send this one from here, without a goroutine's
		// hand-off, and leave what queues meanwhile to one. A caller
		// whose ctx can end waits on its own, below.
		if _, more := p.flushOnce(make([]*scriptCall, 0, p.maxBatch)); more {
			go p.flushLoop()
		}
	case start:
		go p.flushLoop()
	}
	select {
	case <-c.done:
		return p.reply(c)
	case <-ctx.Done():
	}
	name, script := c.name()
	if c.state.CompareAndSwap(queued, gone) {
		// Not pooled: the pipeline that skips it may still look at it.
		return unsent(ctx, name, script, ctx.Err())
	}
	// Sent: wait for the reply a little longer, since a definite answer
	// keeps the task's slot honest, but at most replyGrace, so that a
	// stalled Redis does not hold the caller past its ctx for as long as
	// the client's timeouts and retries take.
	if _, ok := withinGrace(c.done); ok {
		return p.reply(c)
	}
	// Not pooled: the pipeline still holds it, and its reply goes to no
	// one.
	return noReply(ctx, name, script)
}

// name is the call's command and its script's SHA1 or function's name.
func (c *scriptCall) name() (string, string) {
	if c.fn != "" {
		return "fcall", c.fn
	}
	return "evalsha", c.sha
}

// withinGrace waits for a value of ch, once the caller's ctx has ended,
// for replyGrace at most, and reports whether one came.
func withinGrace[T any](ch <-chan T) (T, bool) {
	t := time.NewTimer(replyGrace)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, true
	case <-t.C:
		var zero T
		return zero, false
	}
}

// noReply is a call (name, then a script's SHA1 or a function's name)
// that was sent and had no reply replyGrace after its ctx ended: it fails
// with ctx's error, and the write's fate is open (IsAmbiguous).
func noReply(ctx context.Context, name, script string) *redis.Cmd {
	cmd := redis.NewCmd(ctx, name, script)
	cmd.SetErr(fmt.Errorf("no reply %v after the call's context ended: %w", replyGrace, ctx.Err()))
	return cmd
}

// replyGrace is how long a caller whose ctx ended after its script call
// was sent waits on for the reply.
const replyGrace = 250 * time.Millisecond

// unsent is a call (name, then a script's SHA1 or a function's name) that
// was never sent, failed with err.
func unsent(ctx context.Context, name, script string, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx, name, script)
	cmd.SetErr(err)
	return cmd
}

// writeTrace travels with one Enqueue's write, in its context under
// writeTraceKey{}. sent is set once a script call of it (asynq's write of
// the task) has been sent, oom once one was refused with Redis's OOM
// reply: asynq flattens the errors of its script calls into text, and a
// failure with none sent certainly wrote nothing.
type writeTrace struct{ sent, oom atomic.Bool }

type writeTraceKey struct{}

// traceSent records, in the writeTrace of ctx if any, that a script call
// of it is sent.
func traceSent(ctx context.Context) {
	if tr, ok := ctx.Value(writeTraceKey{}).(*writeTrace); ok {
		tr.sent.Store(true)
	}
}

// traceOOM records, in the writeTrace of ctx if any, that cmd, a script
// call of it, was refused for memory (rediserr.OOM).
func traceOOM(ctx context.Context, cmd *redis.Cmd) {
	if err := cmd.Err(); err != nil && rediserr.IsOOM(err) {
		if tr, ok := ctx.Value(writeTraceKey{}).(*writeTrace); ok {
			tr.oom.Store(true)
		}
	}
}

// flushLoop sends what is waiting, a batch at a time, until nothing is.
func (p *pipelined) flushLoop() {
	batch := make([]*scriptCall, 0, p.maxBatch)
	for more := true; more; {
		batch, more = p.flushOnce(batch)
	}
}

// flushOnce sends a batch of what is waiting, in batch's storage (or the
// pending list's, which it swaps for it: it returns the storage it holds
// now), and reports whether more waits; if not, its pipeline is no longer
// in flight.
func (p *pipelined) flushOnce(batch []*scriptCall) ([]*scriptCall, bool) {
	p.mu.Lock()
	if p.idle() {
		p.mu.Unlock()
		return batch, false
	}
	if len(p.pending) <= p.maxBatch {
		batch, p.pending = p.pending, batch[:0] // the common case: take it all
	} else {
		batch = append(batch[:0], p.pending[:p.maxBatch]...)
		rest := copy(p.pending, p.pending[p.maxBatch:])
		clear(p.pending[rest:])
		p.pending = p.pending[:rest]
	}
	p.mu.Unlock()
	p.flush(batch)
	p.mu.Lock()
	defer p.mu.Unlock()
	return batch, !p.idle()
}

// idle reports whether nothing waits, and if so takes the caller's
// pipeline out of flight. p.mu is held.
func (p *pipelined) idle() bool {
	if len(p.pending) > 0 {
		return false
	}
	p.inflight--
	return true
}

// flush sends the calls of batch whose callers are still waiting as one
// pipeline, and hands each its reply.
func (p *pipelined) flush(batch []*scriptCall) {
	defer clear(batch) // the loop reuses it: hold no call
	var latest time.Time
	bounded := true
	calls := batch[:0]
	for _, c := range batch {
		if c.ctx.Err() != nil {
			continue // its caller is leaving: it finds the call unsent
		}
		if !c.state.CompareAndSwap(queued, sent) {
			continue // its caller left before it was sent
		}
		if c.traced {
			traceSent(c.ctx)
		}
		if d, ok := c.ctx.Deadline(); !ok {
			bounded = false
		} else if d.After(latest) {
			latest = d
		}
		calls = append(calls, c)
	}
	if len(calls) == 0 {
		return
	}
	ctx := context.Background()
	if bounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, later(latest, time.Now().Add(sendGrace)))
		defer cancel()
	}
	pipe := p.UniversalClient.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		if c.fn != "" {
			cmds[i] = pipe.FCall(ctx, c.fn, c.keys, c.args...)
		} else {
			cmds[i] = pipe.EvalSha(ctx, c.sha, c.keys, c.args...)
		}
	}
	// Each command carries its own reply or error, but a hook that fails
	// the whole pipeline without sending it leaves them blank: they get
	// its error.
	if _, err := pipe.Exec(ctx); err != nil {
		for _, cmd := range cmds {
			if cmd.Err() == nil && cmd.Val() == nil {
				cmd.SetErr(err)
			}
		}
	}
	for i, c := range calls {
		c.cmd = cmds[i]
		if c.traced {
			traceOOM(c.ctx, c.cmd)
		}
		c.done <- struct{}{} // c is its caller's again from here on
	}
}
