//go:build admitq_dispatchfloor

package lua

import _ "embed"

var (
	//go:embed floor/leanpark.lua
	leanParkSrc string
	//go:embed floor/leanturn.lua
	leanTurnSrc string
)

const dispatchStandIn = "lua/floor/leanpark.lua and lua/floor/leanturn.lua (build tag admitq_dispatchfloor)"
