//go:build unix

package redistest

import "syscall"

// Pause stops the server's process with SIGSTOP, so that it is still there
// but answers nothing: the kernel keeps accepting connections into the
// listen backlog and buffering what clients write, and every reply hangs.
// That is the "black hole" a dead host or a partitioned network looks like
// to a client, as opposed to the refused connections after Kill. Call
// Resume to let it go on where it stopped.
//
// Pausing a server that is not running, or is paused already, does nothing
// more. Kill, Restart and the test's cleanup work on a paused server; Stop
// does too, but only after its SIGTERM grace period.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a server stopped by Pause with SIGCONT. Clients then get
// the replies to everything they sent while it was paused. Resuming a server
// that is not paused does nothing.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// PID returns the process id of the running server, or 0 when none runs.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// signal sends sig to the server's process under the lock that Kill holds,
// so it never reaches a process that has been reaped (whose pid could be
// reused). The process alone, not its group: with persistence off,
// redis-server forks no children to stop.
func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Errorf("redistest: %v to redis-server %s: %v", sig, s.Addr(), err)
	}
}
