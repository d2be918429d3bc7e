//go:build !race

package enqueue

const raceEnabled = false
