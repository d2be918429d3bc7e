package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed admit.lua
	admitSrc string
	//go:embed usage.lua
	usageSrc string
	//go:embed counter.lua
	counterSrc string
)

// Admit returns the slot-rule script (admit.lua). It trims one or more
// tenants' logs, decides each entry ID in request order and records the ones
// it admits or defers, all atomically and on Redis server time.
//
// Each call returns a new *redis.Script; callers keep the one they use.
func Admit() *redis.Script { return redis.NewScript(admitSrc) }

// Usage returns the read-only script (usage.lua) that reports a tenant's
// entries in the window, its reservations ahead and its next free slot.
func Usage() *redis.Script { return redis.NewScript(usageSrc) }

// Counter returns the counter-mode script (counter.lua): bucketed counters
// that never admit more than the limit in any window, in memory that does
// not grow with the limit.
func Counter() *redis.Script { return redis.NewScript(counterSrc) }
