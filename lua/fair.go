package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The dispatcher's scripts share the prelude fair.lua, which comes first.
var (
	//go:embed fair.lua
	fairSrc string
	//go:embed fair_park.lua
	fairParkSrc string
	//go:embed fair_dispatch.lua
	fairDispatchSrc string
	//go:embed fair_move.lua
	fairMoveSrc string
	//go:embed fair_repair.lua
	fairRepairSrc string
	//go:embed fair_adopt.lua
	fairAdoptSrc string
	//go:embed unique_lock.lua
	uniqueLockSrc string
)

// shebang declares a script with Redis 7 script flags (none): Redis then
// refuses it whole under OOM, before it writes anything, where a script
// without one could trim a log and then fail its ZADD.
const shebang = "#!lua\n"

// FairScript is one of the dispatcher's scripts, with the shebang line
// (Flagged) and without it (Plain), for servers that do not read shebangs,
// such as the embedded miniredis of admitq demo.
type FairScript struct {
	Flagged, Plain *redis.Script
}

func fair(src string) FairScript {
	return FairScript{Flagged: redis.NewScript(shebang + fairSrc + src), Plain: redis.NewScript(fairSrc + src)}
}

// FairPrelude returns fair.lua's source: the keys, constants and steps the
// dispatcher's scripts share.
func FairPrelude() string { return fairSrc }

// FairPark returns fair_park.lua: a producer's task in a dispatched queue
// goes straight in, waits its turn, or is refused.
func FairPark() FairScript { return fair(fairParkSrc) }

// FairDispatch returns fair_dispatch.lua: a worker's heartbeat, the tasks it
// finished, and the grants the queue has space for.
func FairDispatch() FairScript { return fair(fairDispatchSrc) }

// FairMove returns fair_move.lua: granted tasks into asynq's queue, or back
// in line.
func FairMove() FairScript { return fair(fairMoveSrc) }

// FairRepair returns fair_repair.lua: the dispatcher's count checked
// against asynq's view of each task.
func FairRepair() FairScript { return fair(fairRepairSrc) }

// FairAdopt returns fair_adopt.lua: tasks run from outside counted against
// their tenants' places.
func FairAdopt() FairScript { return fair(fairAdoptSrc) }

// UniqueLock returns unique_lock.lua: a parked task's asynq.Unique lock
// gets the task's own TTL.
func UniqueLock() *redis.Script { return redis.NewScript(uniqueLockSrc) }
