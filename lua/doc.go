// Package lua holds admitq's Redis scripts. Each script lives in its own .lua
// file, whose header says what every KEYS and ARGV entry is and what the
// script returns; the files are embedded at build time, never read from disk
// at run time.
//
// The scripts are the contract of the sliding-window log, so they are tested
// directly (against miniredis with an exact clock and against redis-server),
// not only through the admission package that calls them.
//
// The directory floor holds scripts that are not limiters: floors that
// take admit.lua's arguments and answer in its shape but do less, for
// measuring what admission costs (internal/bench). A build with the tag
// admitq_floor or admitq_free carries one in admit.lua's place, and says
// so (AdmitStandIn); no other build does.
package lua
