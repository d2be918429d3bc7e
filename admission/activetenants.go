package admission

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// scanCount is the COUNT hint of each SCAN: Redis looks at about that many
// keys per call, a millisecond or two of its time.
const scanCount = 2000

// ScanTenants calls fn with each tenant whose name matches pattern, a Redis
// glob ("*" or "" for all; see SCAN's MATCH), and whose window is in Redis
// now: every tenant given a slot within its window, or holding one ahead,
// whether its quota is its own or the default. A tenant idle for longer
// than its window has none (its key expires; see the slot rule) and is not
// seen. A tenant may come more than once (SCAN's guarantee, and a tenant
// whose mode changed keeps both keys for a while).
//
// It SCANs every master of a cluster, each call under the per-call timeout
// (a second at least) and the whole under the bulk timeout
// (WithBulkTimeout). On a cluster fn
// may be called from several goroutines, one at a time. fn returning an
// error stops the scan, which returns it.
func (g *Gate) ScanTenants(ctx context.Context, pattern string, fn func(tenant string) error) error {
	if err := g.made(); err != nil {
		return err
	}
	if pattern == "" {
		pattern = "*"
	}
	bctx, cancel := context.WithTimeoutCause(ctx, g.opts.bulkTimeout, errBulkTimeout(g.opts.bulkTimeout))
	defer cancel()
	start := g.opts.prefix + ":{"
	// The suffix after the pattern has a fixed length, so a key matches
	// exactly when its tenant matches pattern, whatever the tenant holds.
	match := globEscape(g.opts.prefix) + ":{" + pattern + "}:[lc][on][gt]"
	var mu sync.Mutex
	var stopped error // fn's error, under mu: no more calls once it fails
	scan := func(ctx context.Context, node redis.UniversalClient) error {
		var cursor uint64
		for {
			var keys []string
			var next uint64
			err := bulkCall(bctx, g.opts.pageTimeout(), func(ctx context.Context) (err error) {
				keys, next, err = node.Scan(ctx, cursor, match, scanCount).Result()
				return err
			})
			if err != nil {
				return bulkError(ctx, bctx, fmt.Sprintf("scan tenants %q", match), err)
			}
			for _, key := range keys {
				tenant, ok := tenantOfKey(key, start)
				if !ok {
					continue
				}
				mu.Lock()
				if stopped == nil {
					stopped = fn(tenant)
				}
				err := stopped
				mu.Unlock()
				if err != nil {
					return err
				}
			}
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	switch c := g.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(bctx, func(_ context.Context, node *redis.Client) error { return scan(ctx, node) })
	case *redis.Ring:
		return c.ForEachShard(bctx, func(_ context.Context, node *redis.Client) error { return scan(ctx, node) })
	default:
		return scan(ctx, g.rdb)
	}
}

// globEscape escapes s for a Redis glob, so that it matches only itself.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// tenantOfKey returns the tenant of a log or counter key that begins with
// start (the prefix and the hash tag's brace), if it is one.
func tenantOfKey(key, start string) (string, bool) {
	tenant, ok := strings.CutPrefix(key, start)
	if !ok {
		return "", false
	}
	if t, ok := strings.CutSuffix(tenant, "}:log"); ok {
		tenant = t
	} else if t, ok := strings.CutSuffix(tenant, "}:cnt"); ok {
		tenant = t
	} else {
		return "", false
	}
	return tenant, ValidateTenant(tenant) == nil
}
