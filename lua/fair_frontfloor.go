//go:build admitq_frontfloor

package lua

import _ "embed"

//go:embed floor/frontall.lua
var frontSrc string

const frontStandIn = "lua/floor/frontall.lua (build tag admitq_frontfloor)"
