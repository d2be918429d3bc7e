// Package lua holds admitq's Redis scripts. Each script lives in its own .lua
// file, whose header says what every KEYS and ARGV entry is and what the
// script returns; the files are embedded at build time, never read from disk
// at run time.
//
// The scripts are the contract of the sliding-window log, so they are tested
// directly (against miniredis with an exact clock and against redis-server),
// not only through the admission package that calls them.
//
// The directory floor holds stand-ins for measuring floors
// (internal/bench), never for use: scripts that take admit.lua's or
// counter.lua's arguments and answer in their shape but do less, a
// dispatcher rule that puts every capped tenant's grant at the front of the
// queue, and a park and a turn that keep one first-in-first-out line per
// queue. A build with the tag admitq_floor or admitq_free carries one in
// admit.lua's place (AdmitStandIn), admitq_counterfloor in counter.lua's
// (CounterStandIn), admitq_frontfloor in the place of fair.lua's fronts
// (FrontStandIn), admitq_dispatchfloor in the place of fair_park.lua and
// fair_dispatch.lua (DispatchStandIn), and says so; no other build does.
package lua
