package admission

import (
	"crypto/rand"
	"strconv"
	"sync/atomic"
)

// idGen makes short entry IDs: a random prefix per Gate and a counter, both
// in base 36. Short IDs keep a log entry small; the random prefix keeps
// producers that share Redis from colliding.
type idGen struct {
	prefix string
	n      atomic.Uint64
}

func newIDGen() *idGen {
	var b [5]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux and Go 1.24+
	v := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32
	return &idGen{prefix: strconv.FormatUint(v, 36) + "."}
}

func (g *idGen) next() string {
	return g.prefix + strconv.FormatUint(g.n.Add(1), 36)
}
