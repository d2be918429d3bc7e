package enqueue

import (
	"crypto/rand"
	"encoding/hex"
)

// newTaskID returns a random (version 4) UUID in its usual text form, as
// uuid.NewString does, in one allocation, the string: uuid reads its bytes
// through an io.Reader, which moves them to the heap, and then formats
// them into a second one. It is on every Enqueue of a task without an ID.
func newTaskID() string {
	var u [16]byte
	_, _ = rand.Read(u[:])  // crypto/rand.Read never fails on Linux and Go 1.24+
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}
