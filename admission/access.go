package admission

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Prefix returns the prefix of every Redis key the gate writes
// (WithPrefix). Packages that keep state of their own beside the gate's,
// such as the dispatcher, put it under the same prefix.
func (g *Gate) Prefix() string {
	if g == nil {
		return ""
	}
	return g.opts.prefix
}

// Timeout returns the deadline of each of the gate's Redis calls
// (WithTimeout). Packages that call Redis for the gate's callers, as the
// dispatcher does for a producer's park, bound their calls by it too.
func (g *Gate) Timeout() time.Duration {
	if g == nil {
		return 0
	}
	return g.opts.timeout
}

// Redis returns the client the gate was made with. The caller does not
// own it.
func (g *Gate) Redis() redis.UniversalClient {
	if g == nil {
		return nil
	}
	return g.rdb
}

// Quota returns the quota the gate applies to tenant: its own, else the
// default, from the gate's cache of its Quotas. The error wraps
// ErrInvalidTenant or ErrNoQuota, or says why the quotas could not be read.
func (g *Gate) Quota(ctx context.Context, tenant string) (Quota, error) {
	if err := g.made(); err != nil {
		return Quota{}, err
	}
	if err := ValidateTenant(tenant); err != nil {
		return Quota{}, err
	}
	return g.quota(ctx, tenant)
}
