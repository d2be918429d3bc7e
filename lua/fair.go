package lua

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"

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

// FairScript is one of the dispatcher's scripts: a function of the
// dispatcher's Redis Functions library (Function, in FairLibrary), and the
// same as a script, with the shebang line (Flagged) and without it
// (Plain), for servers without functions, or that do not read shebangs,
// such as the embedded miniredis of admitq demo.
type FairScript struct {
	Function       string
	Flagged, Plain *redis.Script
}

// fairBodies are the scripts after the prelude, by the name of their
// function in the library.
var fairBodies = []struct{ name, src string }{
	{"park", parkSrc}, {"dispatch", dispatchSrc}, {"move", fairMoveSrc},
	{"repair", fairRepairSrc}, {"adopt", fairAdoptSrc},
}

// library is the dispatcher's Functions library and its version, a hash of
// its source: a library of another version (a mixed fleet) loads beside it.
var library, version = func() (string, string) {
	var b strings.Builder
	b.WriteString(prelude)
	for _, body := range fairBodies {
		fmt.Fprintf(&b, "\nlocal function %s()\n%s\nend\n", body.name, body.src)
	}
	src := b.String()
	sum := sha1.Sum([]byte(src))
	v := hex.EncodeToString(sum[:6])
	b.Reset()
	fmt.Fprintf(&b, "#!lua name=admitq_fair_%s\n%s\n", v, src)
	for _, body := range fairBodies {
		fmt.Fprintf(&b, "redis.register_function('%s', function(keys_, argv) begin(keys_, argv) return %s() end)\n", fairFunction(body.name, v), body.name)
	}
	return b.String(), v
}()

// prelude is fair.lua, with frontSrc in the place of its fronts in a
// benchmark build (FrontStandIn).
var prelude = func() string {
	if frontSrc == "" {
		return fairSrc
	}
	const begin = "local function fronts("
	i := strings.Index(fairSrc, begin)
	n := strings.Index(fairSrc[max(i, 0):], "\nend\n")
	if i < 0 || n < 0 {
		panic("lua: fair.lua declares no function fronts for " + frontStandIn + " to replace")
	}
	return fairSrc[:i] + frontSrc + fairSrc[i+n+len("\nend\n"):]
}()

// FrontStandIn names the stand-in a benchmark build carries in the place of
// fair.lua's fronts, the rule that puts a grant at the front of the queue,
// or returns "" for fair.lua's own, as in every build without the tag
// admitq_frontfloor. That stand-in, floor/frontall.lua, fronts every grant
// of a capped tenant with tasks in flight: the best placement for a tenant
// its cap holds below its share, to measure how much of its cap such a
// tenant can use (admitq bench --only dispatch).
func FrontStandIn() string { return frontStandIn }

// DispatchStandIn names the stand-ins a benchmark build carries in the
// place of fair_park.lua and fair_dispatch.lua, or returns "" for the
// dispatcher's own scripts, as in every build without the tag
// admitq_dispatchfloor. Those stand-ins, floor/leanpark.lua and
// floor/leanturn.lua, keep one first-in-first-out line per queue and do
// the least a park, a grant, a move and a finish must: a floor for fair
// dispatch's cost (admitq bench --only dispatch), not a rule.
func DispatchStandIn() string { return dispatchStandIn }

func fairFunction(name, version string) string { return "admitq_fair_" + name + "_" + version }

// FairLibrary returns the source of the dispatcher's Redis Functions
// library (FUNCTION LOAD): the prelude fair.lua, defined once when it
// loads, and each script as a function named as FairScript.Function names
// it. Its name and its functions' carry a hash of its source.
func FairLibrary() string { return library }

func fair(name, src string) FairScript {
	// As a script, the prelude is defined anew at each call: KEYS and ARGV
	// are kept before its locals of those names hide them.
	script := "local EVAL_KEYS, EVAL_ARGV = KEYS, ARGV\n" + prelude +
		"\nlocal function main()\n" + src + "\nend\nbegin(EVAL_KEYS, EVAL_ARGV)\nreturn main()\n"
	return FairScript{Function: fairFunction(name, version), Flagged: redis.NewScript(shebang + script), Plain: redis.NewScript(script)}
}

// FairPrelude returns fair.lua's source: the keys, constants and steps the
// dispatcher's scripts share (with the stand-in of a benchmark build,
// FrontStandIn).
func FairPrelude() string { return prelude }

// FairPark returns fair_park.lua: a producer's task in a dispatched queue
// goes straight in, waits its turn, or is refused.
func FairPark() FairScript { return fair("park", parkSrc) }

// FairDispatch returns fair_dispatch.lua: a worker's heartbeat, the tasks it
// finished, and the grants the queue has space for.
func FairDispatch() FairScript { return fair("dispatch", dispatchSrc) }

// FairMove returns fair_move.lua: granted tasks into asynq's queue, or back
// in line.
func FairMove() FairScript { return fair("move", fairMoveSrc) }

// FairRepair returns fair_repair.lua: the dispatcher's count checked
// against asynq's view of each task.
func FairRepair() FairScript { return fair("repair", fairRepairSrc) }

// FairAdopt returns fair_adopt.lua: tasks run from outside counted against
// their tenants' places.
func FairAdopt() FairScript { return fair("adopt", fairAdoptSrc) }

// UniqueLock returns unique_lock.lua: a parked task's asynq.Unique lock
// gets the task's own TTL.
func UniqueLock() *redis.Script { return redis.NewScript(uniqueLockSrc) }
