//go:build admitq_counterfloor

package lua

import _ "embed"

//go:embed floor/counterfloor.lua
var counterSrc string

const counterStandIn = "lua/floor/counterfloor.lua (build tag admitq_counterfloor)"

func counterScript() string { return counterSrc }
