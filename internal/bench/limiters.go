package bench

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
)

// A Limiter makes one admission decision per call. Each contender the bench
// compares is one; all of them enforce the same Limit per Window per tenant.
type Limiter interface {
	Allow(ctx context.Context, tenant string) (Result, error)
}

// Result is one decision, as the bench counts it.
type Result struct {
	Outcome admission.Outcome
	// Local reports a decision made without a Redis call (the gate's deny
	// cache).
	Local bool
}

// gateLimiter is admitq's Gate, with generated entry IDs.
type gateLimiter struct{ g *admission.Gate }

func (l gateLimiter) Allow(ctx context.Context, tenant string) (Result, error) {
	d, err := l.g.Admit(ctx, tenant)
	return Result{Outcome: d.Outcome, Local: d.Local}, err
}

// Close stops the gate's background work.
func (l gateLimiter) Close() error { return l.g.Close() }

// txPipeline is the transaction-pipeline sliding window of the design notes
// (background/000), written afresh: trim, count, add and expire in one
// MULTI/EXEC on the client's clock, then a second round trip to take the
// candidate back out when the count was already at the limit. Its known
// faults stay in, as they are what it is measured for: the rejected
// candidate counts against concurrent requests until it is removed, and the
// client clocks set the scores.
type txPipeline struct {
	rdb     redis.UniversalClient
	prefix  string
	limit   int64
	window  time.Duration
	process string
}

func (l *txPipeline) key(tenant string) string { return l.prefix + ":{" + tenant + "}" }

func (l *txPipeline) Allow(ctx context.Context, tenant string) (Result, error) {
	now := time.Now()
	key := l.key(tenant)
	member := strconv.FormatInt(now.UnixNano(), 10) + ":" + l.process
	pipe := l.rdb.TxPipeline()
	pipe.ZRemRangeByScore(ctx, key, "0", strconv.FormatInt(now.Add(-l.window).UnixMilli(), 10))
	count := pipe.ZCard(ctx, key)
	pipe.ZAdd(ctx, key, redis.Z{Score: float64(now.UnixMilli()), Member: member})
	pipe.PExpire(ctx, key, l.window)
	if _, err := pipe.Exec(ctx); err != nil {
		return Result{}, err
	}
	if count.Val() >= l.limit {
		if err := l.rdb.ZRem(ctx, key, member).Err(); err != nil {
			return Result{}, err
		}
		return Result{Outcome: admission.Rejected}, nil
	}
	return Result{Outcome: admission.Admitted}, nil
}

//go:embed plainlua.lua
var plainLuaSrc string

// plainLua is the plain Lua sliding-window log of the design notes
// (background/002), written afresh: trim, count and add in one script call.
// Members are the caller's UnixNano and a process suffix, as in the
// transaction-pipeline version.
type plainLua struct {
	rdb     redis.UniversalClient
	script  *redis.Script
	prefix  string
	limit   int
	window  int64 // ms
	process string
}

func (l *plainLua) key(tenant string) string { return l.prefix + ":{" + tenant + "}" }

func (l *plainLua) Allow(ctx context.Context, tenant string) (Result, error) {
	now := time.Now()
	member := strconv.FormatInt(now.UnixNano(), 10) + ":" + l.process
	ok, err := l.script.Run(ctx, l.rdb, []string{l.key(tenant)}, now.UnixMilli(), l.window, l.limit, member).Int()
	if err != nil {
		return Result{}, err
	}
	if ok == 0 {
		return Result{Outcome: admission.Rejected}, nil
	}
	return Result{Outcome: admission.Admitted}, nil
}

// fixedWindow is the fixed-window counter the design notes started from:
// INCR and PEXPIRE of one key per tenant and window, pipelined into one
// round trip. It lets a tenant spend twice its quota across a window
// boundary, and counts rejected requests too.
type fixedWindow struct {
	rdb    redis.UniversalClient
	prefix string
	limit  int64
	window time.Duration
}

func (l *fixedWindow) Allow(ctx context.Context, tenant string) (Result, error) {
	idx := time.Now().UnixMilli() / l.window.Milliseconds()
	key := l.prefix + ":{" + tenant + "}:" + strconv.FormatInt(idx, 10)
	pipe := l.rdb.Pipeline()
	n := pipe.Incr(ctx, key)
	pipe.PExpire(ctx, key, l.window)
	if _, err := pipe.Exec(ctx); err != nil {
		return Result{}, err
	}
	if n.Val() > l.limit {
		return Result{Outcome: admission.Rejected}, nil
	}
	return Result{Outcome: admission.Admitted}, nil
}

// redisRate is github.com/go-redis/redis_rate (GCRA) with Rate and Burst
// both Limit per Window.
type redisRate struct {
	lim    *redis_rate.Limiter
	prefix string
	limit  redis_rate.Limit
}

func (l *redisRate) Allow(ctx context.Context, tenant string) (Result, error) {
	res, err := l.lim.Allow(ctx, l.prefix+":{"+tenant+"}", l.limit)
	if err != nil {
		return Result{}, err
	}
	if res.Allowed == 0 {
		return Result{Outcome: admission.Rejected}, nil
	}
	return Result{Outcome: admission.Admitted}, nil
}

// benchPayload is the payload of every task the bench enqueues: small, as
// most job arguments are.
var benchPayload = []byte(`{"user":12345,"op":"send"}`)

// bareAsynq is asynq's own Enqueue, with no admission at all.
type bareAsynq struct {
	c     *asynq.Client
	queue string
}

func (l *bareAsynq) Allow(ctx context.Context, tenant string) (Result, error) {
	_, err := l.c.EnqueueContext(ctx, asynq.NewTask("admitq-bench", benchPayload), asynq.Queue(l.queue))
	return Result{Outcome: admission.Admitted}, err
}

// processID is a short random suffix that keeps the members of the
// baselines from colliding across bench processes sharing a Redis.
func processID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
