package admission

import (
	"crypto/rand"
	"encoding/binary"
	"strconv"
	"sync/atomic"
)

// idGen makes short entry IDs: a counter from a random start per Gate, in
// decimal, below 2^63. Redis keeps such an ID in a log's listpack (up to
// 128 entries, by default) as an 8-byte integer, 10 bytes with its header
// and back length, where the base-36 "prefix.counter" string it replaced
// took 12 to 16: a log entry went from 29 to 24 bytes (admitq bench, Limit
// 100). A larger log is a skiplist, which keeps each ID as a string: there
// the 19 digits cost what the old IDs of a long-running producer did, and
// up to 13% more per entry than a young producer's (117 to 132 bytes).
// The random start keeps producers that share Redis from colliding: two
// Gates' IDs meet only where their runs of IDs overlap, out of 2^63.
type idGen struct {
	start uint64 // below 2^63
	n     atomic.Uint64
}

// idMask keeps IDs below 2^63, where Redis stores them as integers.
const idMask = 1<<63 - 1

func newIDGen() *idGen {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux and Go 1.24+
	return &idGen{start: binary.LittleEndian.Uint64(b[:]) & idMask}
}

func (g *idGen) next() string {
	var b [20]byte // one allocation, the string
	return string(strconv.AppendUint(b[:0], (g.start+g.n.Add(1))&idMask, 10))
}

// owns reports whether id was made by g: its canonical decimal form, at
// an offset from g's start that g has reached.
func (g *idGen) owns(id string) bool {
	v, err := strconv.ParseUint(id, 10, 63)
	if err != nil || (id[0] == '0' && len(id) > 1) {
		return false
	}
	return ((v-g.start)&idMask)-1 < g.n.Load() // offsets 1..n; 0 wraps to the top
}
