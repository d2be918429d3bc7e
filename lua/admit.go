//go:build !admitq_floor && !admitq_free

package lua

import _ "embed"

// admitSrc is admit.lua; a benchmark build puts a floor in its place
// (AdmitStandIn).
//
//go:embed admit.lua
var admitSrc string

const admitStandIn = ""
