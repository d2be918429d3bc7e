package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// MinRedisVersion is the oldest Redis the gate's scripts run on: they use
// PEXPIRETIME and script flags (a "#!lua" first line, which makes Redis
// refuse a script whole while it is out of memory), both Redis 7.0. On an
// older server a script fails to compile, or halfway, after its first
// writes, so the gate refuses the server instead.
const MinRedisVersion = "7.0"

// ErrRedisVersion is returned by a Gate whose Redis (on a cluster, any of
// its masters) is older than MinRedisVersion. The error's text names the
// server's version and the one needed. Nothing is written to Redis.
var ErrRedisVersion = errors.New("admitq: redis version too old")

// versionCheck asks Redis its version once, on a gate's first call. It is
// shared by the gates AtGranularity makes.
type versionCheck struct {
	done atomic.Bool // err is final

	mu      sync.Mutex
	err     error
	running chan struct{} // closed when the check in flight ends; nil when none is
	next    time.Time     // after a check nobody answered, when to ask again
}

// checkVersion returns ErrRedisVersion, wrapped, if Redis is too old. The
// question goes out once, in the background with the gate's timeout, and
// callers wait for the answer up to a quarter of the timeout (or their
// ctx), each on its own clock, never behind one another: a Redis that
// answers at all answers in well under that, and a slow or down one does
// not add a whole timeout to the first calls' own. A question nobody
// answered (Redis down or slow; on a cluster, a master) is asked again a
// second later, and meanwhile calls go on: the outage is the decisions' to
// handle. A server that answers without a version (INFO disabled or
// renamed, a Redis-like server) is trusted.
func (g *Gate) checkVersion(ctx context.Context) error {
	v := g.version
	if v.done.Load() {
		return v.err
	}
	v.mu.Lock()
	if v.done.Load() {
		v.mu.Unlock()
		return v.err
	}
	ch := v.running
	if ch == nil {
		if time.Now().Before(v.next) {
			v.mu.Unlock()
			return nil
		}
		ch = make(chan struct{})
		v.running = ch
		go g.settleVersion(ch)
	}
	v.mu.Unlock()
	t := time.NewTimer(g.opts.timeout / 4)
	defer t.Stop()
	select {
	case <-ch:
	case <-ctx.Done():
	case <-t.C:
	}
	if v.done.Load() {
		return v.err
	}
	return nil
}

// settleVersion asks the version and records the answer, or when to ask
// again; then it closes ch.
func (g *Gate) settleVersion(ch chan struct{}) {
	answered, policies, err := g.askVersion(context.Background())
	v := g.version
	v.mu.Lock()
	if answered {
		v.err = err
		v.done.Store(true)
	} else {
		v.next = time.Now().Add(time.Second)
	}
	v.running = nil
	v.mu.Unlock()
	close(ch)
	if answered && err == nil {
		g.warnEviction(policies)
	}
}

// NoEviction is the maxmemory-policy admitq needs. Under any other policy
// Redis, once full, evicts keys to make room, a tenant's log or counter
// among them, and every bound on that tenant breaks without an error:
// an LRU policy sees a tenant the deny cache answers as idle, and a
// volatile policy evicts only keys with an expiry, which admitq's logs
// are. Redis's own default is noeviction; managed services often set
// another.
const NoEviction = "noeviction"

// MaxmemoryPolicy returns rdb's maxmemory-policy, by server address (on a
// cluster, each master's; on a ring, each shard's). It reads INFO memory
// (which works where CONFIG is disabled or renamed), or CONFIG GET where
// INFO does not name the policy. A server that answers neither is left
// out, and the first such error is returned with the policies of the
// others. Anything but NoEviction breaks admitq's bounds silently once
// Redis is full; a Gate logs a warning for it at its first call.
func MaxmemoryPolicy(ctx context.Context, rdb redis.UniversalClient) (map[string]string, error) {
	var (
		mu       sync.Mutex
		policies = map[string]string{}
		first    error
	)
	read := func(ctx context.Context, c redis.Cmdable, addr string) error {
		p, err := readPolicy(ctx, c)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			policies[addr] = p
		case first == nil:
			first = fmt.Errorf("admitq: maxmemory-policy of %s: %w", addr, err)
		}
		return nil
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return read(ctx, m, m.Options().Addr)
		})
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, m *redis.Client) error {
			return read(ctx, m, m.Options().Addr)
		})
	case *redis.Client:
		err = read(ctx, c, c.Options().Addr)
	default:
		err = read(ctx, rdb, "redis")
	}
	mu.Lock()
	defer mu.Unlock()
	if err == nil {
		err = first
	}
	return policies, err
}

// readPolicy reads one server's maxmemory-policy: from INFO memory, which
// every Redis answers (even where CONFIG is disabled or renamed), or from
// CONFIG GET on a server whose INFO does not name it.
func readPolicy(ctx context.Context, c redis.Cmdable) (string, error) {
	info, err := c.Info(ctx, "memory").Result()
	if p := infoField(info, "maxmemory_policy"); err == nil && p != "" {
		return p, nil
	}
	if err != nil && unavailable(err) {
		return "", err
	}
	return configPolicy(ctx, c)
}

// configPolicy reads one server's maxmemory-policy with CONFIG GET.
func configPolicy(ctx context.Context, c redis.Cmdable) (string, error) {
	m, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return "", err
	}
	if p, ok := m["maxmemory-policy"]; ok {
		return p, nil
	}
	return "", errors.New("neither INFO memory nor CONFIG GET names it")
}

// warnEviction logs a warning for each server whose maxmemory-policy is
// not NoEviction.
func (g *Gate) warnEviction(policies map[string]string) {
	for addr, p := range policies {
		if c, ok := g.rdb.(*redis.Client); ok && addr == "" {
			addr = c.Options().Addr
		}
		if p != NoEviction {
			g.opts.logger.Warn("admitq: Redis maxmemory-policy is "+p+", it should be "+NoEviction+
				": once Redis is full it evicts keys, tenants' logs among them, and every bound on those tenants breaks without an error",
				"addr", addr, "maxmemory_policy", p)
		}
	}
}

// askVersion asks Redis (every master of a cluster) for its version, and
// its maxmemory-policy, in one INFO (its default sections hold both). It
// reports whether the question is settled: every server answered, or one
// answered too old a version, which err then names; and the policies,
// by address.
func (g *Gate) askVersion(ctx context.Context) (answered bool, policies map[string]string, err error) {
	ctx, cancel := context.WithTimeout(ctx, g.opts.timeout)
	defer cancel()
	var (
		mu     sync.Mutex
		infos  []string // each prefixed with its server's address and a newline
		silent bool     // a server did not answer
	)
	policies = map[string]string{}
	ask := func(ctx context.Context, c redis.Cmdable, addr string) error {
		info, err := c.Info(ctx).Result()
		policy := infoField(info, "maxmemory_policy")
		if err == nil && policy == "" {
			policy, _ = configPolicy(ctx, c)
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			infos = append(infos, addr+"\n"+info)
			if policy != "" {
				policies[addr] = policy
			}
		case unavailable(err) || ctx.Err() != nil:
			silent = true
		}
		// Any other error is an answer without a version.
		return nil
	}
	cerr := bounded(ctx, func(ctx context.Context) error {
		if cc, ok := g.rdb.(*redis.ClusterClient); ok {
			return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				return ask(ctx, m, m.Options().Addr)
			})
		}
		return ask(ctx, g.rdb, "")
	})
	mu.Lock()
	defer mu.Unlock()
	if err := tooOld(infos); err != nil {
		return true, nil, err
	}
	return cerr == nil && !silent, policies, nil
}

// tooOld returns an error for the first INFO reply, each prefixed with its
// server's address and a newline, that names a version older than
// MinRedisVersion.
func tooOld(infos []string) error {
	for _, s := range infos {
		addr, info, _ := strings.Cut(s, "\n")
		version := infoField(info, "redis_version")
		if version == "" || versionAtLeast(version, MinRedisVersion) {
			continue
		}
		if addr != "" {
			addr = " at " + addr
		}
		return fmt.Errorf("%w: Redis %s%s; admitq needs Redis %s or later (PEXPIRETIME, script flags)", ErrRedisVersion, version, addr, MinRedisVersion)
	}
	return nil
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if k, val, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == field {
			return val
		}
	}
	return ""
}

// versionAtLeast compares dotted versions by their numbers; a part that is
// not a number counts as 0.
func versionAtLeast(have, want string) bool {
	h, w := strings.Split(have, "."), strings.Split(want, ".")
	for i := range max(len(h), len(w)) {
		var a, b int
		if i < len(h) {
			a, _ = strconv.Atoi(h[i])
		}
		if i < len(w) {
			b, _ = strconv.Atoi(w[i])
		}
		if a != b {
			return a > b
		}
	}
	return true
}
