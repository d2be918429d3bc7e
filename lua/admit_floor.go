//go:build admitq_floor

package lua

import _ "embed"

//go:embed floor/ttlfloor.lua
var admitSrc string

const admitStandIn = "lua/floor/ttlfloor.lua (build tag admitq_floor)"
