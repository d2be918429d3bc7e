package lua

import (
	_ "embed"
	"strings"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed usage.lua
	usageSrc string
	//go:embed counter_prelude.lua
	counterPreludeSrc string
	//go:embed counter_usage.lua
	counterUsageSrc string
	//go:embed counter_release.lua
	counterReleaseSrc string
)

// Admit returns the slot-rule script (admit.lua). It trims one or more
// tenants' logs, decides each entry ID in request order and records the ones
// it admits or defers, all atomically and on Redis server time.
//
// Each call returns a new *redis.Script; callers keep the one they use.
func Admit() *redis.Script { return redis.NewScript(admitSrc) }

// AdmitStandIn names the script that a benchmark build carries in
// admit.lua's place, or returns "" for admit.lua itself, as in every build
// without the tags below. The stand-ins take admit.lua's KEYS and ARGV and
// answer in its shape, but they are floors, not limiters, for measuring
// what admission costs the rest of a caller's path (admitq bench):
//
//   - admitq_floor: floor/ttlfloor.lua, the least any limiter on a
//     sliding-window log whose logs expire must do (count, trim, record,
//     set the TTL), with no FIFO and no idempotent retries;
//   - admitq_free: floor/free.lua, which only reads the clock and admits
//     everything.
//
// The two tags together do not build (admitSrc is declared twice).
func AdmitStandIn() string { return admitStandIn }

// Usage returns the read-only script (usage.lua) that reports a tenant's
// entries in the window, its reservations ahead and its next free slot.
func Usage() *redis.Script { return redis.NewScript(usageSrc) }

// Counter returns the counter-mode script (counter.lua, with
// counter_prelude.lua after its shebang line): bucketed counters that
// never admit more than the limit in any window, in memory that does not
// grow with the limit. Redis refuses it whole while over maxmemory.
func Counter() *redis.Script { return redis.NewScript(counterScript()) }

// CounterStandIn names the floor a benchmark build carries in counter.lua's
// place, or returns "" for counter.lua itself, as in every build without
// the tag admitq_counterfloor. That floor, floor/counterfloor.lua, takes
// counter.lua's KEYS and ARGV and admits everything, with the one read
// and one write of a hash per decision that any bucketed counter in a hash
// needs.
func CounterStandIn() string { return counterStandIn }

// CounterUsage returns the read-only script (counter_usage.lua, with the
// prelude) that reports a Counter-mode tenant's window, its entries ahead
// and its next free slot.
func CounterUsage() *redis.Script {
	return redis.NewScript(withPrelude(counterUsageSrc, counterPreludeSrc))
}

// CounterRelease returns the script (counter_release.lua, with the
// prelude) that gives back one Counter-mode entry.
func CounterRelease() *redis.Script {
	return redis.NewScript(withPrelude(counterReleaseSrc, counterPreludeSrc))
}

// withPrelude puts prelude after script's first line, its shebang, which
// Redis reads only there.
func withPrelude(script, prelude string) string {
	shebang, body, _ := strings.Cut(script, "\n")
	return shebang + "\n" + prelude + body
}
