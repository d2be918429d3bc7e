//go:build !unix

package bench

import "time"

// processCPU returns 0: the bench only reads its CPU time on Unix.
func processCPU() time.Duration { return 0 }
