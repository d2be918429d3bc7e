//go:build !admitq_dispatchfloor

package lua

// parkSrc and dispatchSrc are the park and the turn: fair_park.lua and
// fair_dispatch.lua, and their stand-ins in a benchmark build
// (DispatchStandIn).
var parkSrc, dispatchSrc = fairParkSrc, fairDispatchSrc

const dispatchStandIn = ""
