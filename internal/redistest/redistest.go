package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireEnv is the environment variable that turns a missing redis-server
// from a skip into a failure. make test and CI set it to 1.
const RequireEnv = "ADMITQ_REQUIRE_REDIS"

const (
	// readyTimeout bounds how long a fresh redis-server may take to answer.
	// It normally takes a few milliseconds; the slack is for loaded CI machines.
	readyTimeout = 10 * time.Second
	// probeTimeout bounds one readiness probe. It is short so that a port
	// held by something that accepts but never answers does not hide our
	// server's exit for long; waitReady probes again until readyTimeout.
	probeTimeout = 250 * time.Millisecond
	// stopTimeout is how long Stop waits after SIGTERM before it uses SIGKILL.
	stopTimeout = 5 * time.Second
	// startAttempts bounds the retries when another process takes the port
	// between our probe and redis-server's bind.
	startAttempts = 5
	// logTail is how much of redis-server's log goes into failure messages.
	logTail = 4 << 10
)

// errPortTaken reports that redis-server could not have the port it was
// given. Start retries on another port; Restart waits for the port.
var errPortTaken = errors.New("port taken by another process")

// RequireRedis returns the path of redis-server. Where it is not on PATH it
// skips the test with a message saying how to install it, or, when
// ADMITQ_REQUIRE_REDIS=1, fails the test instead.
func RequireRedis(t testing.TB) string {
	t.Helper()
	return requireRedis(t, os.Stderr)
}

// requireRedis is RequireRedis with the loud copy of a skip message going
// to stderr, which tests replace.
func requireRedis(t testing.TB, stderr io.Writer) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err == nil {
		return path
	}
	msg := "redistest: redis-server is not on PATH, so this test cannot run against a real Redis.\n" +
		"\tInstall it:  sudo apt-get install redis-server redis-tools\n" +
		"\tor run:      make test   (installs it when run as root)"
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal(msg + "\n\t" + RequireEnv + "=1 is set, so this is a failure, not a skip.")
	}
	// t.Skip output only shows under -v; stderr makes the skip hard to miss.
	fmt.Fprintf(stderr, "SKIP %s: %s\n", t.Name(), msg)
	t.Skip(msg)
	return ""
}

// An Option configures a server started by Start.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	password    string
	aclUser     string
	aclPassword string
	tls         bool
	args        []string
	// clusterBus also reserves port+10000, which Redis Cluster uses for its bus.
	clusterBus bool
}

// WithPassword protects the default user with pw (requirepass). Options and
// URL carry the password.
func WithPassword(pw string) Option {
	return optionFunc(func(c *config) { c.password = pw })
}

// WithACLUser adds an ACL user with every permission (on >pw ~* &* +@all).
// Options and URL log in as that user.
//
// Unless WithPassword is also given, the default user is switched off, so a
// client that does not send the user name is refused, as on a server that
// is set up with ACLs only. With WithPassword, the default user keeps that
// password.
func WithACLUser(user, pw string) Option {
	return optionFunc(func(c *config) { c.aclUser, c.aclPassword = user, pw })
}

// WithTLS makes the server accept TLS only (tls-port, port 0), with a
// certificate for 127.0.0.1 from a throwaway CA written to the temp dir.
// Options trusts that CA; CACertFile gives it to command-line tools. Clients
// need no certificate of their own (tls-auth-clients no).
func WithTLS() Option {
	return optionFunc(func(c *config) { c.tls = true })
}

// WithArgs appends redis-server command-line arguments, such as
// WithArgs("--maxmemory", "1mb"), or WithArgs("--enable-debug-command",
// "local") for DEBUG SLEEP in chaos tests (Redis 7). They come last, so they
// override the defaults Start sets.
func WithArgs(args ...string) Option {
	return optionFunc(func(c *config) { c.args = append(c.args, args...) })
}

// Server is a redis-server process started by Start. It belongs to the test
// that started it and is stopped when that test ends. Its methods are safe
// for concurrent use.
type Server struct {
	t    testing.TB
	bin  string
	cfg  config
	dir  string
	port int // fixed once Start returns, so Restart comes back on the same address
	tls  *tlsFiles

	// mu serialises Kill, Stop and Restart, and guards cmd.
	mu  sync.Mutex
	cmd *exec.Cmd // nil while no process runs
}

// Start starts a redis-server for the test and waits until it answers. The
// server is stopped, and its files removed, when the test ends.
//
// If redis-server is not on PATH, the test is skipped (see RequireRedis).
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin := RequireRedis(t)
	var cfg config
	for _, o := range opts {
		o.apply(&cfg)
	}
	return start(t, bin, cfg)
}

func start(t testing.TB, bin string, cfg config) *Server {
	t.Helper()
	s := &Server{t: t, bin: bin, cfg: cfg, dir: t.TempDir()}
	if cfg.tls {
		files, err := writeTLSFiles(s.dir)
		if err != nil {
			t.Fatalf("redistest: %v", err)
		}
		s.tls = files
	}
	var err error
	for range startAttempts {
		s.port, err = freePort(cfg.clusterBus)
		if err != nil {
			break
		}
		err = s.launchLocked()
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	if err != nil {
		t.Fatalf("redistest: start redis-server: %v", err)
	}
	// After TempDir: cleanups run last-in first-out, so the process is gone
	// before its directory is removed. Kill, not Stop: there is nothing to
	// save, and a graceful shutdown waits for Redis' next 100 ms tick.
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			t.Logf("redistest: end of the log of redis-server %s:\n%s", s.Addr(), s.readLog(0))
		}
	})
	return s
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// URL returns a redis:// URL for the server, or rediss:// with WithTLS, with
// the user and password when set. For TLS, tools must also trust
// CACertFile, e.g. redis-cli --tls --cacert.
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr()}
	if s.tls != nil {
		u.Scheme = "rediss"
	}
	if user, pw := s.credentials(); pw != "" {
		if user == "" {
			// redis-cli 7.0 turns "redis://:pw@" into AUTH "" pw, which fails.
			user = "default"
		}
		u.User = url.UserPassword(user, pw)
	}
	return u.String()
}

// CACertFile returns the PEM file of the CA that signed the server's
// certificate, or "" without WithTLS.
func (s *Server) CACertFile() string {
	if s.tls == nil {
		return ""
	}
	return s.tls.caFile
}

// Options returns new go-redis options for the server, with the user,
// password and TLS configuration it needs. The caller may change them.
func (s *Server) Options() *redis.Options {
	user, pw := s.credentials()
	return &redis.Options{
		Addr:      s.Addr(),
		Username:  user,
		Password:  pw,
		TLSConfig: s.tlsConfig(),
	}
}

// Client returns a new client for the server, closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill kills the process with SIGKILL and waits for it to go, as if Redis
// crashed. Clients see connection errors until Restart. Killing a server
// that is not running does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

// Restart starts the server again on the same port, after killing it if it
// still runs, and waits until it answers. Like a crashed Redis coming back
// without persistence, it starts empty. A cluster node keeps its
// nodes.conf, so it rejoins its cluster with its slots.
//
// Restart fails the test that started the server if the server does not
// come back, so call it from that test's goroutine.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	deadline := time.Now().Add(readyTimeout)
	for {
		err := s.launchLocked()
		if err == nil {
			return
		}
		// The port may be briefly held by someone else's port probe; wait
		// for it rather than move, since clients know this address.
		if !errors.Is(err, errPortTaken) || time.Now().After(deadline) {
			s.t.Fatalf("redistest: restart redis-server %s: %v", s.Addr(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop shuts the server down gracefully with SIGTERM, or with SIGKILL if
// that takes too long, and waits for the process to go. It is idempotent.
// The test's cleanup kills the server anyway, so call Stop only to see how
// clients take a clean shutdown.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := s.cmd
	if cmd == nil {
		return
	}
	s.cmd = nil
	// Signal before anything waits: until the process is reaped its pid
	// cannot be reused, so the signal cannot reach a stranger.
	if err := signalTerm(cmd.Process); err != nil {
		killTree(cmd.Process)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopTimeout):
		_ = cmd.Process.Kill() // safe even if Wait has just reaped it
		<-done
	}
}

func (s *Server) killLocked() {
	if s.cmd == nil {
		return
	}
	killTree(s.cmd.Process)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// launchLocked starts redis-server on s.port and waits until it answers.
// On failure no process is left running.
func (s *Server) launchLocked() error {
	logPath := s.logPath()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	st, err := logf.Stat()
	if err != nil {
		logf.Close()
		return err
	}
	logStart := st.Size()

	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.dir
	// A file, not a pipe: the child writes to it directly, so no goroutine
	// copies output for as long as the server lives.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	logf.Close() // the child holds its own descriptor
	if err != nil {
		return err
	}

	if err := s.waitReady(cmd); err != nil {
		killTree(cmd.Process)
		_ = cmd.Wait()
		log := s.readLog(logStart)
		if strings.Contains(log, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return fmt.Errorf("%s on %s: %w\n--- redis-server log (%s) ---\n%s", s.bin, s.Addr(), err, logPath, log)
	}
	s.cmd = cmd
	return nil
}

// waitReady polls the server until it answers as the process we started.
// Checking the pid matters: if our redis-server lost the race for the port,
// another Redis may answer there, and tests must never touch it.
func (s *Server) waitReady(cmd *exec.Cmd) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		if exited(cmd.Process) {
			return errors.New("redis-server exited during startup")
		}
		pid, err := s.probePID()
		switch {
		case err == nil && pid == cmd.Process.Pid:
			return nil
		case err == nil:
			return fmt.Errorf("%w: redis-server pid %d answers on %s, ours is pid %d", errPortTaken, pid, s.Addr(), cmd.Process.Pid)
		case time.Now().After(deadline):
			return fmt.Errorf("no answer within %v: %w", readyTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// probePID asks the server for its process id over a fresh connection,
// logged in like Options. It speaks RESP itself rather than use go-redis,
// whose pool retries failed dials in a goroutine that outlives Close.
func (s *Server) probePID() (int, error) {
	d := net.Dialer{Timeout: probeTimeout}
	var conn net.Conn
	var err error
	if cfg := s.tlsConfig(); cfg != nil {
		conn, err = tls.DialWithDialer(&d, "tcp", s.Addr(), cfg)
	} else {
		conn, err = d.Dial("tcp", s.Addr())
	}
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(probeTimeout)); err != nil {
		return 0, err
	}
	rd := bufio.NewReader(conn)
	if user, pw := s.credentials(); pw != "" {
		args := []string{"AUTH", pw}
		if user != "" {
			args = []string{"AUTH", user, pw}
		}
		if _, err := roundTrip(conn, rd, args...); err != nil {
			return 0, err
		}
	}
	info, err := roundTrip(conn, rd, "INFO", "server")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// roundTrip sends one command and reads a simple, error or bulk string reply.
func roundTrip(w io.Writer, rd *bufio.Reader, args ...string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return "", err
	}
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

func (s *Server) args() []string {
	port := strconv.Itoa(s.port)
	args := []string{
		"--bind", "127.0.0.1",
		// Loopback only anyway; keep Redis' own guard on, as in production.
		"--protected-mode", "yes",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "", // stdout, which is our log file
	}
	if s.tls != nil {
		args = append(args,
			"--port", "0",
			"--tls-port", port,
			"--tls-cert-file", s.tls.certFile,
			"--tls-key-file", s.tls.keyFile,
			"--tls-ca-cert-file", s.tls.caFile,
			"--tls-auth-clients", "no",
		)
	} else {
		args = append(args, "--port", port)
	}
	if s.cfg.password != "" {
		args = append(args, "--requirepass", s.cfg.password)
	}
	if s.cfg.aclUser != "" {
		if s.cfg.password == "" {
			args = append(args, "--user", "default", "off")
		}
		args = append(args, "--user", s.cfg.aclUser, "on", ">"+s.cfg.aclPassword, "~*", "&*", "+@all")
	}
	return append(args, s.cfg.args...)
}

// credentials returns what clients log in with: the ACL user if there is
// one, else the default user's password.
func (s *Server) credentials() (user, pw string) {
	if s.cfg.aclUser != "" {
		return s.cfg.aclUser, s.cfg.aclPassword
	}
	return "", s.cfg.password
}

func (s *Server) tlsConfig() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.clientConfig()
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "redis-server.log") }

// readLog returns the log written since offset from, cut to its last logTail bytes.
func (s *Server) readLog(from int64) string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if from > int64(len(b)) {
		from = 0
	}
	b = b[from:]
	if len(b) > logTail {
		b = append([]byte("..."), b[len(b)-logTail:]...)
	}
	return string(b)
}

// freePort finds a port on 127.0.0.1 that is free right now. Another process
// may take it before redis-server binds it; start then retries.
//
// With bus, port+10000 must be free too, for the Redis Cluster bus, so the
// port is drawn from 10000-55000 rather than from the kernel's ephemeral range,
// which reaches 60999.
func freePort(bus bool) (int, error) {
	if !bus {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	for range 100 {
		port := 10000 + rand.IntN(45001)
		if portFree(port) && portFree(port+10000) {
			return port, nil
		}
	}
	return 0, errors.New("no free port pair (port, port+10000) on 127.0.0.1")
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
