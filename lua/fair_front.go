//go:build !admitq_frontfloor

package lua

// frontSrc replaces fair.lua's fronts in a benchmark build (FrontStandIn);
// empty here.
const frontSrc, frontStandIn = "", ""
