//go:build !unix

package worker

import (
	"os"
	"syscall"
)

// runSignals are the signals Run handles. There is no SIGTSTP here.
func runSignals() []os.Signal { return []os.Signal{syscall.SIGTERM, os.Interrupt} }

// isStopSignal reports false: without SIGTSTP, no signal only stops fetching.
func isStopSignal(os.Signal) bool { return false }
