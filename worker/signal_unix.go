//go:build unix

package worker

import (
	"os"
	"syscall"
)

// runSignals are the signals Run handles, as asynq.Server.Run does.
func runSignals() []os.Signal {
	return []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGTSTP}
}

// isStopSignal reports whether sig asks Run to stop fetching tasks but keep
// running.
func isStopSignal(sig os.Signal) bool { return sig == syscall.SIGTSTP }
