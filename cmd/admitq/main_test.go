package main

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// result is what one run of the command left behind.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return "exit " + strconv.Itoa(r.code) + "\nstdout:\n" + r.stdout + "stderr:\n" + r.stderr
}

// admitq runs the command in-process with an empty environment, so that
// the caller's ADMITQ_REDIS never leaks in.
func admitq(t *testing.T, args ...string) result {
	t.Helper()
	return admitqEnv(t, nil, args...)
}

func admitqEnv(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var out, errb syncBuffer
	a := &app{stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }}
	code := a.run(ctx, args)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// mustRun runs the command and fails the test unless it exits 0.
func mustRun(t *testing.T, args ...string) result {
	t.Helper()
	r := admitq(t, args...)
	if r.code != 0 {
		t.Fatalf("admitq %s: %v", strings.Join(args, " "), r)
	}
	return r
}

// syncBuffer is a bytes.Buffer that a running worker and the test may use
// at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// oneLine fails unless s is exactly one line starting "admitq: ".
func oneLine(t *testing.T, what, s string) {
	t.Helper()
	if !strings.HasPrefix(s, "admitq: ") || strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Errorf("%s: stderr = %q, want one line starting %q", what, s, "admitq: ")
	}
	if strings.Count(s, "admitq: ") > 1 {
		t.Errorf("%s: stderr = %q, want %q once", what, s, "admitq: ")
	}
}
