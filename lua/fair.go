package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The dispatcher's scripts share the prelude fair.lua, which comes first:
// its shebang must be the script's first line.
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
)

// FairPark returns fair_park.lua: a producer's task in a dispatched queue
// goes straight in, waits its turn, or is refused.
func FairPark() *redis.Script { return redis.NewScript(fairSrc + fairParkSrc) }

// FairDispatch returns fair_dispatch.lua: a worker's heartbeat, the tasks it
// finished, and the grants the queue has space for.
func FairDispatch() *redis.Script { return redis.NewScript(fairSrc + fairDispatchSrc) }

// FairMove returns fair_move.lua: granted tasks into asynq's queue, or back
// in line.
func FairMove() *redis.Script { return redis.NewScript(fairSrc + fairMoveSrc) }

// FairRepair returns fair_repair.lua: the dispatcher's count checked
// against asynq's view of each task.
func FairRepair() *redis.Script { return redis.NewScript(fairSrc + fairRepairSrc) }
