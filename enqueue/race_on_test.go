//go:build race

package enqueue

// raceEnabled: the race detector changes what escapes, so allocation counts
// are not checked under it.
const raceEnabled = true
