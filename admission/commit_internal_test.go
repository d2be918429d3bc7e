package admission

import (
	"strconv"
	"testing"
)

// TestIdleLanesAreDropped: a committer that has come to keep maxLanes
// lanes forgets the idle ones, never one with a request waiting or out,
// and below maxLanes keeps every lane.
func TestIdleLanesAreDropped(t *testing.T) {
	c := &committer{lanes: map[string]*lane{}}
	for i := range maxLanes - 3 {
		c.lanes[strconv.Itoa(i)] = &lane{addr: strconv.Itoa(i)}
	}
	busy := map[string]*lane{
		"waiting": {addr: "waiting", pending: []*request{{}}},
		"sending": {addr: "sending", inflight: 1},
		"out":     {addr: "out", out: []int64{1}},
	}
	for addr, l := range busy {
		c.lanes[addr] = l
	}
	c.dropIdleLanes()
	if len(c.lanes) != len(busy) {
		t.Fatalf("%d lanes left, want the %d busy ones", len(c.lanes), len(busy))
	}
	for addr, l := range busy {
		if c.lanes[addr] != l {
			t.Errorf("lane %s was dropped with work in it", addr)
		}
	}
	c.lanes["idle"] = &lane{addr: "idle"}
	c.dropIdleLanes()
	if c.lanes["idle"] == nil {
		t.Error("an idle lane was dropped below maxLanes")
	}
}
