//go:build !admitq_counterfloor

package lua

import _ "embed"

// counterSrc is counter.lua; a benchmark build puts a floor in its place
// (CounterStandIn).
//
//go:embed counter.lua
var counterSrc string

const counterStandIn = ""

func counterScript() string { return withPrelude(counterSrc, counterPreludeSrc) }
