package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// MinRedisVersion is the oldest Redis the gate's scripts run on: they use
// PEXPIRE … GT (Redis 7.0) and ZMSCORE (6.2). On an older server a script
// fails halfway, after its ZADDs have run, so the gate refuses it instead.
const MinRedisVersion = "7.0"

// ErrRedisVersion is returned by a Gate whose Redis (on a cluster, any of
// its masters) is older than MinRedisVersion. The error's text names the
// server's version and the one needed. Nothing is written to Redis.
var ErrRedisVersion = errors.New("admitq: redis version too old")

// versionCheck asks Redis its version once, on a gate's first call. It is
// shared by the gates AtGranularity makes.
type versionCheck struct {
	done atomic.Bool // err is final
	mu   sync.Mutex
	err  error
}

// checkVersion returns ErrRedisVersion, wrapped, if Redis is too old. A
// Redis that cannot be asked now (down, slow) is asked again on the next
// call, and the call goes on: the outage is the decision's to handle. One
// that answers without a version (INFO disabled or renamed, a Redis-like
// server) is trusted.
func (g *Gate) checkVersion(ctx context.Context) error {
	v := g.version
	if v.done.Load() {
		return v.err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.done.Load() {
		return v.err
	}
	ctx, cancel := context.WithTimeout(ctx, g.opts.timeout)
	defer cancel()
	var infos []string
	err := bounded(ctx, func(ctx context.Context) error {
		if cc, ok := g.rdb.(*redis.ClusterClient); ok {
			var mu sync.Mutex
			return cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				info, err := m.Info(ctx, "server").Result()
				mu.Lock()
				defer mu.Unlock()
				infos = append(infos, m.Options().Addr+"\n"+info)
				return err
			})
		}
		info, err := g.rdb.Info(ctx, "server").Result()
		infos = append(infos, "\n"+info)
		return err
	})
	if err != nil && (unavailable(err) || ctx.Err() != nil) {
		return nil // infos may still be written to: the call is out
	}
	v.err = tooOld(infos)
	v.done.Store(true)
	return v.err
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
		return fmt.Errorf("%w: Redis %s%s; admitq needs Redis %s or later (PEXPIRE GT, ZMSCORE)", ErrRedisVersion, version, addr, MinRedisVersion)
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
