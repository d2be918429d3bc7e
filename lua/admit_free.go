//go:build admitq_free

package lua

import _ "embed"

//go:embed floor/free.lua
var admitSrc string

const admitStandIn = "lua/floor/free.lua (build tag admitq_free)"
