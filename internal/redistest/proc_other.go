//go:build !linux

package redistest

import (
	"os"
	"syscall"
)

// sysProcAttr has no parent-death signal outside Linux: a test binary killed
// before its cleanups run leaves its servers behind there.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalTerm(p *os.Process) error { return p.Signal(syscall.SIGTERM) }

func killTree(p *os.Process) { _ = p.Kill() }

// exited cannot tell without reaping the process, so a server that dies
// during startup is noticed only at the readiness deadline.
func exited(*os.Process) bool { return false }
