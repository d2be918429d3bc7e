package redisaddr

import (
	"flag"
	"strings"
	"testing"
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
