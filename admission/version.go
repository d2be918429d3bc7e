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

	"github.com/admitq/admitq/internal/bounded"
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

// ErrClusterNode is returned by CheckServer for a plain client (not a
// *redis.ClusterClient) whose server is a node of a Redis Cluster: such a
// client reaches only the hash slots that node serves. A call through one
// for a tenant of another node fails with an error that wraps both it and
// the node's MOVED reply. Use a cluster client (redis.NewClusterClient;
// admitq's --redis-cluster flag) instead.
var ErrClusterNode = errors.New("admitq: redis server is a cluster node")

// versionCheck asks Redis its version once, on the first call of a Gate
// (shared by the gates AtGranularity makes) or the first write of a
// RedisQuotas: the answer is kept on the value that asked, never in the
// package.
type versionCheck struct {
	rdb     redis.UniversalClient
	timeout time.Duration
	// settled, when set, hears the servers' maxmemory-policies once every
	// server has answered a version new enough.
	settled func(policies map[string]string)

	done atomic.Bool // err is final

	mu      sync.Mutex
	err     error
	running chan struct{} // closed when the check in flight ends; nil when none is
	next    time.Time     // after a check nobody answered, when to ask again
}

func newVersionCheck(rdb redis.UniversalClient, timeout time.Duration, settled func(map[string]string)) *versionCheck {
	return &versionCheck{rdb: rdb, timeout: timeout, settled: settled}
}

// checkVersion returns ErrRedisVersion, wrapped, if Redis is too old,
// waiting for the answer up to a quarter of the gate's timeout (see
// versionCheck.check): a Redis that answers at all answers in well under
// that, and a slow or down one does not add a whole timeout to the first
// calls' own.
func (g *Gate) checkVersion(ctx context.Context) error {
	return g.version.check(ctx, g.opts.timeout/4)
}

// check returns ErrRedisVersion, wrapped, if Redis is too old. The
// question goes out once, in the background with the timeout, and callers
// wait for the answer up to wait (or their ctx), each on its own clock,
// never behind one another. A question nobody answered (Redis down or
// slow; on a cluster, a master) is asked again a second later, and
// meanwhile calls go on: the outage is theirs to handle. A server that
// answers without a version (INFO disabled or renamed, a Redis-like
// server) is trusted.
func (v *versionCheck) check(ctx context.Context, wait time.Duration) error {
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
		go v.settle(ch)
	}
	v.mu.Unlock()
	t := time.NewTimer(wait)
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

// settle asks the version and records the answer, or when to ask again;
// then it closes ch.
func (v *versionCheck) settle(ch chan struct{}) {
	answered, policies, err := askVersion(context.Background(), v.rdb, v.timeout)
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
	if answered && err == nil && v.settled != nil {
		v.settled(policies)
	}
}

// CheckServer reports whether rdb's Redis can serve admitq, asking every
// server once (INFO; on a cluster, every master): an error wrapping
// ErrRedisVersion when one is older than MinRedisVersion; one wrapping
// ErrClusterNode when rdb is not a cluster client but its server is a
// cluster node (cluster_enabled:1); and one wrapping ErrUnavailable when a
// server does not answer, or on a cluster when no master does. On a
// cluster some of whose masters answer, one that does not is no error
// here: with cluster-require-full-coverage off the others serve their
// slots, and each call to its slots fails on its own until it is back
// (with it on, Redis's default, every call fails with CLUSTERDOWN until
// then, and says so). A
// server that answers without a version (INFO disabled or renamed) is
// trusted. It writes nothing. Commands and workers
// call it at start, so that a misconfiguration fails at once and says
// why; a Gate checks the version by itself on its first call, and a
// RedisQuotas on its first write. ctx bounds the whole check.
func CheckServer(ctx context.Context, rdb redis.UniversalClient) error {
	_, cluster := rdb.(*redis.ClusterClient)
	var (
		mu    sync.Mutex
		infos []string // as askVersion's
		down  error
	)
	err := eachServer(ctx, rdb, func(ctx context.Context, c redis.Cmdable, addr string) error {
		info, err := c.Info(ctx).Result()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			infos = append(infos, addr+"\n"+info)
		case (unavailable(err) || ctx.Err() != nil) && down == nil:
			down = fmt.Errorf("%w: check server %s: %w", ErrUnavailable, orRedis(addr), err)
		}
		return nil
	})
	if err != nil && down == nil {
		if unavailable(err) || ctx.Err() != nil {
			return fmt.Errorf("%w: check server: %w", ErrUnavailable, err)
		}
		return fmt.Errorf("admitq: check server: %w", err)
	}
	if err := tooOld(infos); err != nil {
		return err
	}
	if cluster && len(infos) > 0 {
		down = nil // see above: the masters that answer serve their slots
	}
	if !cluster {
		for _, s := range infos {
			addr, info, _ := strings.Cut(s, "\n")
			if infoField(info, "cluster_enabled") == "1" {
				return fmt.Errorf("%w: %s has cluster_enabled:1, and a plain client reaches only the slots that node serves; use a cluster client (redis.NewClusterClient, or --redis-cluster)", ErrClusterNode, orRedis(addr))
			}
		}
	}
	return down
}

// orRedis names a server by addr, or as "redis" when addr is unknown.
func orRedis(addr string) string {
	if addr == "" {
		return "redis"
	}
	return addr
}

// eachServer calls fn for each server of rdb, with its address: each
// master of a cluster, each shard of a ring, and otherwise rdb itself
// (addr is its Addr, or "" for a client of another type).
func eachServer(ctx context.Context, rdb redis.UniversalClient, fn func(ctx context.Context, c redis.Cmdable, addr string) error) error {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return fn(ctx, m, m.Options().Addr)
		})
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, m *redis.Client) error {
			return fn(ctx, m, m.Options().Addr)
		})
	case *redis.Client:
		return fn(ctx, c, c.Options().Addr)
	}
	return fn(ctx, rdb, "")
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
		addr = orRedis(addr)
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
	err := eachServer(ctx, rdb, read)
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
		addr = orRedis(addr)
		if p != NoEviction {
			g.opts.logger.Warn("admitq: Redis maxmemory-policy is "+p+", it should be "+NoEviction+
				": once Redis is full it evicts keys, tenants' logs among them, and every bound on those tenants breaks without an error",
				"addr", addr, "maxmemory_policy", p)
		}
	}
}

// askVersion asks rdb (every master of a cluster) for its version, and
// its maxmemory-policy, in one INFO (its default sections hold both),
// within timeout. It reports whether the question is settled: every server
// answered, or one answered too old a version, which err then names; and
// the policies, by address.
func askVersion(ctx context.Context, rdb redis.UniversalClient, timeout time.Duration) (answered bool, policies map[string]string, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
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
	cerr := bounded.Call(ctx, func(ctx context.Context) error { return eachServer(ctx, rdb, ask) })
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
