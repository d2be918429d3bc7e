package redisaddr

import (
	"flag"
	"strings"
	"testing"

	"github.com/admitq/admitq/internal/redistest"
)

// leak returns a run of 4 bytes of a secret that msg holds, or "".
func leak(msg string, secrets ...string) string {
	for _, s := range secrets {
		for i := 0; i+4 <= len(s); i++ {
			if strings.Contains(msg, s[i:i+4]) {
				return s[i : i+4]
			}
		}
	}
	return ""
}

func TestNoErrorHoldsAPassword(t *testing.T) {
	for _, c := range []struct{ addr, pass string }{
		{"alice:AlicePw%2342@host:port", "AlicePw%2342"},
		{"alice:AlicePw%2342@127.0.0.1:6379/x", "AlicePw%2342"},
		{"alice:AlicePw#42@127.0.0.1:6379", "AlicePw#42"},
		{"redis://alice:AlicePw#42@127.0.0.1:6379", "AlicePw#42"},
		{"redis://alice:AlicePw/42@127.0.0.1:6379", "AlicePw/42"},
		{"redis://alice:AlicePw?42@127.0.0.1:6379", "AlicePw?42"},
		{"redis://alice:AlicePw/42@127.0.0.1:port", "AlicePw/42"},
		{"rediss://alice:AlicePw%zz@127.0.0.1:6379", "AlicePw%zz"},
		{"unix://alice:AlicePw?42@/tmp/redis.sock", "AlicePw?42"},
	} {
		_, err := Options(c.addr)
		if err == nil {
			t.Errorf("%s: no error", c.addr)
			continue
		}
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		ferr := CheckFlag(fs, c.addr)
		if l := leak(err.Error()+ferr.Error(), c.pass, strings.ReplaceAll(c.pass, "%23", "#")); l != "" {
			t.Errorf("%s: %q holds %q", c.addr, err, l)
		}
	}
}

func TestAddressesReadAsTheCommandReadsThem(t *testing.T) {
	for _, c := range []struct{ addr, host, user, pass string }{
		{"127.0.0.1:6379", "127.0.0.1:6379", "", ""},
		{"alice:AlicePw%2342@127.0.0.1:6380", "127.0.0.1:6380", "alice", "AlicePw#42"},
		{"redis://alice:AlicePw%2342@127.0.0.1:6380/2", "127.0.0.1:6380", "alice", "AlicePw#42"},
		{"redis://alice:AlicePw@42@127.0.0.1:6380", "127.0.0.1:6380", "alice", "AlicePw@42"},
		{"localhost", "localhost:6379", "", ""},
	} {
		o, err := Options(c.addr)
		if err != nil || o.Addr != c.host || o.Username != c.user || o.Password != c.pass {
			t.Errorf("Options(%q) = %+v, %v", c.addr, o, err)
		}
	}
	if _, err := Options(""); err == nil {
		t.Error(`Options("") is no error`)
	}
	if got := Redact("alice:AlicePw%2342@host:port"); got != "xxxxx@host:port" {
		t.Errorf("Redact = %q", got)
	}
}

func TestRedactMasksTheQuery(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"redis://127.0.0.1:1?addr=s3cretpass:1", "redis://127.0.0.1:1?addr=xxxxx"},
		{"127.0.0.1:1/0?db=0&password=s3cretpass", "127.0.0.1:1/0?db=xxxxx&password=xxxxx"},
		{"redis://alice:AlicePw?42@127.0.0.1:1?s3cretpass", "redis://xxxxx@127.0.0.1:1?xxxxx"},
		{"redis://127.0.0.1:1", "redis://127.0.0.1:1"},
	} {
		if got := Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
		_, err := Options(c.in)
		if err != nil && strings.Contains(err.Error(), "s3cretpass") {
			t.Errorf("Options(%q): %v", c.in, err)
		}
	}
}

// -redis's default comes from ADMITQ_REDIS after parsing, so that a
// usage message, which prints defaults, never shows its password.
func TestResolve(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "ADMITQ_REDIS" {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		desc, env string
		args      []string
		want      string // "" for an error
		errHas    string
	}{
		{desc: "the default", want: Default},
		{desc: "ADMITQ_REDIS", env: "r:1", want: "r:1"},
		{desc: "the flag wins", env: "r:1", args: []string{"-redis", "s:2"}, want: "s:2"},
		{desc: "an empty flag", env: "r:1", args: []string{"-redis", ""}, errHas: "-redis is empty"},
		{desc: "a bad ADMITQ_REDIS is named", env: "redis://u:s3cretpass@h:port", errHas: "ADMITQ_REDIS redis://xxxxx@h:port"},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		var v string
		Var(fs, &v)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		got, err := Resolve(fs, v, env(c.env))
		switch {
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("%s: %q, %v; want %q", c.desc, got, err, c.want)
		case c.want == "" && (err == nil || !strings.Contains(err.Error(), c.errHas) || strings.Contains(err.Error(), "s3cret")):
			t.Errorf("%s: %q, %v; want an error with %q", c.desc, got, err, c.errHas)
		}
		var usage strings.Builder
		fs.SetOutput(&usage)
		fs.PrintDefaults()
		if c.env != "" && strings.Contains(usage.String(), c.env) {
			t.Errorf("%s: usage shows ADMITQ_REDIS: %s", c.desc, usage.String())
		}
	}
}

// Ping refuses a node of a Redis Cluster in one line: the examples take
// one server.
func TestPingRefusesAClusterNode(t *testing.T) {
	c := redistest.StartCluster(t)
	o, err := Options(c.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	err = Ping(t.Context(), o)
	if err == nil || !strings.Contains(err.Error(), "is a node of a Redis Cluster, and the examples take one server") || strings.Contains(err.Error(), "\n") {
		t.Errorf("Ping(a cluster node) = %v", err)
	}
	srv := redistest.Start(t)
	o, _ = Options(srv.Addr())
	if err := Ping(t.Context(), o); err != nil {
		t.Errorf("Ping(one server) = %v", err)
	}
}
