//go:build admitq_dispatchfloor

package lua

import _ "embed"

// parkSrc and dispatchSrc are the park and the turn: in this benchmark
// build, fair_park.lua's and fair_dispatch.lua's stand-ins
// (DispatchStandIn).
var (
	//go:embed floor/leanpark.lua
	parkSrc string
	//go:embed floor/leanturn.lua
	dispatchSrc string
)

const dispatchStandIn = "lua/floor/leanpark.lua and lua/floor/leanturn.lua (build tag admitq_dispatchfloor)"
