package admission

import (
	"crypto/rand"
	"encoding/binary"
	"strconv"
	"strings"
	"sync/atomic"
)

// idGen makes short entry IDs from one counter per Gate, in the form that
// costs the tenant's log the least memory (see next).
type idGen struct {
	start  uint64 // random, below 2^63: where the decimal IDs begin
	prefix string // the same draw's top 40 bits in base 36, and "."
	n      atomic.Uint64
}

// idMask keeps IDs below 2^63, where Redis stores them as integers.
const idMask = 1<<63 - 1

// listpackEntries is Redis's default zset-max-listpack-entries: a log of
// at most this many entries is a listpack, a larger one a skiplist, and
// stays one until it expires. (A server set otherwise only changes what an
// ID costs, never a decision.)
const listpackEntries = 128

// logBound is the most entries a log under q can hold: at most Limit slots
// in any window, over the window and MaxDelay ahead of now, and up to
// trimEvery that have left the window and wait for the next trim. Work
// scheduled further ahead (AdmitAt) can add more; it is rare, and costs
// only memory.
func logBound(q Quota) int {
	if q.Unlimited() {
		return listpackEntries + 1 // no log: the shorter string, unique across producers
	}
	ahead := int64(0)
	if q.Window > 0 {
		ahead = int64((q.MaxDelay + q.Window - 1) / q.Window) // windows ahead, rounded up
	}
	if ahead >= listpackEntries || int64(q.Limit) > listpackEntries {
		return listpackEntries + 1 // a skiplist, however much larger
	}
	return q.Limit*int(1+ahead) + trimEvery
}

func newIDGen() *idGen {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux and Go 1.24+
	v := binary.LittleEndian.Uint64(b[:])
	return &idGen{start: v & idMask, prefix: strconv.FormatUint(v>>24, 36) + "."}
}

// next returns a new ID for a log of at most bound entries (logBound). A
// log that stays a listpack gets a counter from g's random start, in
// decimal below 2^63, which the listpack keeps as an 8-byte integer,
// smaller than any string. A log that can grow larger may become a
// skiplist, which keeps every ID as a string, so it gets the shorter
// string: g's prefix and the counter in base 36. The random start and
// prefix keep producers that share Redis from colliding.
func (g *idGen) next(bound int) string {
	n := g.n.Add(1)
	var b [32]byte // prefix (at most 9) and counter (at most 13): one allocation, the string
	if bound <= listpackEntries {
		return string(strconv.AppendUint(b[:0], (g.start+n)&idMask, 10))
	}
	return string(strconv.AppendUint(append(b[:0], g.prefix...), n, 36))
}

// owns reports whether id was made by g: a base-36 ID with g's prefix, or
// a decimal one in canonical form at an offset from g's start that g has
// reached.
func (g *idGen) owns(id string) bool {
	if strings.HasPrefix(id, g.prefix) {
		return true
	}
	v, err := strconv.ParseUint(id, 10, 63)
	if err != nil || (id[0] == '0' && len(id) > 1) {
		return false
	}
	return ((v-g.start)&idMask)-1 < g.n.Load() // offsets 1..n; 0 wraps to the top
}
