//go:build !admitq_dispatchfloor

package lua

// leanParkSrc and leanTurnSrc replace fair_park.lua and fair_dispatch.lua
// in a benchmark build (DispatchStandIn); empty here.
const leanParkSrc, leanTurnSrc, dispatchStandIn = "", "", ""
