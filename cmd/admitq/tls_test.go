package main

import (
	"strings"
	"testing"

	"github.com/admitq/admitq/internal/redistest"
)

func TestTLSWithACLUser(t *testing.T) {
	t.Parallel()
	const password = "s3cret-Pa55word"
	srv := redistest.Start(t, redistest.WithTLS(), redistest.WithACLUser("alice", password))
	if !strings.HasPrefix(srv.URL(), "rediss://alice:"+password+"@") {
		t.Fatalf("redistest URL = %q, want rediss:// with alice's password", srv.URL())
	}
	base := []string{"--redis", srv.URL(), "--tls-ca", srv.CACertFile()}

	var outputs []result
	run := func(args ...string) result {
		t.Helper()
		r := mustRun(t, append(base, args...)...)
		outputs = append(outputs, r)
		return r
	}
	run("quota", "set", "acme", "--limit", "1", "--window", "10s", "--max-delay", "15s")
	run("quota", "get", "acme")
	run("quota", "list", "--json")
	if r := run("enqueue", "--tenant", "acme", "--type", "x"); !strings.HasPrefix(r.stdout, "admitted") {
		t.Errorf("enqueue over TLS: %v", r)
	}
	if r := run("status", "--json"); !strings.Contains(r.stdout, `"in_window": 1`) {
		t.Errorf("status over TLS: %v", r)
	}

	// Failures must not show the password either.
	for _, c := range []struct {
		desc string
		args []string
	}{
		{"without the CA", []string{"--redis", srv.URL(), "quota", "list"}},
		{"with a wrong password", []string{"--redis", strings.Replace(srv.URL(), password, "wrong-"+password, 1), "--tls-ca", srv.CACertFile(), "quota", "list"}},
		{"with plain redis://", []string{"--redis", strings.Replace(srv.URL(), "rediss://", "redis://", 1), "--timeout", "500ms", "quota", "list"}},
	} {
		r := admitq(t, c.args...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "cannot reach Redis at redis") || !strings.Contains(r.stderr, srv.Addr()) {
			t.Errorf("%s: %v\nwant exit 1 naming %s", c.desc, r, srv.Addr())
		}
		oneLine(t, c.desc, r.stderr)
		outputs = append(outputs, r)
	}
	for _, r := range outputs {
		if strings.Contains(r.stdout+r.stderr, password) {
			t.Errorf("output holds the password:\n%v", r)
		}
	}
}
