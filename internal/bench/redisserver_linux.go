package bench

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill redis-server if the bench dies
// without stopping it, so a crash leaves no server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
