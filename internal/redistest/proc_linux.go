//go:build linux

package redistest

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		// Its own process group, so killTree also reaches anything
		// redis-server forks, and a Ctrl-C aimed at go test does not hit
		// the servers before the test binary's cleanups can.
		Setpgid: true,
		// If the test binary dies without running its cleanups (a -timeout
		// panic, SIGKILL), the kernel kills the servers too. It fires when
		// the OS thread that started the child exits; the Go runtime keeps
		// its threads, so in practice that is when the binary exits.
		Pdeathsig: syscall.SIGKILL,
	}
}

// signalTerm asks the server's process group to shut down.
func signalTerm(p *os.Process) error {
	return syscall.Kill(-p.Pid, syscall.SIGTERM)
}

// killTree kills the server's process group. Call it only before the
// process is reaped, so its pid, and so the group id, is not reused.
func killTree(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
}

// exited reports whether the process has exited, without reaping it, so a
// failed start is noticed at once rather than at the readiness deadline.
func exited(p *os.Process) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain ") ".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	state := b[i+2]
	return state == 'Z' || state == 'X'
}
