package admission

import (
	"crypto/rand"
	"strconv"
	"strings"
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

// owns reports whether id was made by g.
func (g *idGen) owns(id string) bool { return strings.HasPrefix(id, g.prefix) }

func (g *idGen) next() string {
	var b [32]byte // prefix (at most 9) and counter (at most 13): one allocation, the string
	return string(strconv.AppendUint(append(b[:0], g.prefix...), g.n.Add(1), 36))
}
