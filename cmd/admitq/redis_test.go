package main

import (
	"strings"
	"testing"
	"time"
)

// passwordCases are Redis URLs whose password must show nowhere: escaped,
// and with each character a URL parser reads as the end of it.
var passwordCases = []struct {
	desc, url string
	secrets   []string // none of these may show, nor any 4-byte run of them
}{
	{"escaped #", "redis://alice:AlicePw%2342@127.0.0.1:1", []string{"AlicePw%2342", "AlicePw#42"}},
	{"escaped #, host:port form", "alice:AlicePw%2342@127.0.0.1:1", []string{"AlicePw%2342", "AlicePw#42"}},
	{"unescaped #", "redis://alice:AlicePw#42@127.0.0.1:1", []string{"AlicePw#42"}},
	{"unescaped #, host:port form", "alice:AlicePw#42@127.0.0.1:1", []string{"AlicePw#42"}},
	{"unescaped /", "redis://alice:AlicePw/42@127.0.0.1:1", []string{"AlicePw/42"}},
	{"unescaped ?", "redis://alice:AlicePw?42@127.0.0.1:1", []string{"AlicePw?42"}},
	{"unescaped @", "redis://alice:AlicePw@42@127.0.0.1:1", []string{"AlicePw@42"}},
	{"unescaped / and a bad port", "redis://alice:AlicePw/42@127.0.0.1:port", []string{"AlicePw/42"}},
	{"bad escape", "redis://alice:AlicePw%zz42@127.0.0.1:1", []string{"AlicePw%zz42"}},
	{"rediss, unescaped #", "rediss://alice:AlicePw#42@127.0.0.1:1/2", []string{"AlicePw#42"}},
	{"unix socket, unescaped ?", "unix://alice:AlicePw?42@/tmp/no.sock", []string{"AlicePw?42"}},
	{"cluster, unescaped #", "", []string{"AlicePw#42"}},
	{"a password as the value of a query option", "redis://127.0.0.1:1?addr=Qz9s3cret:1", []string{"Qz9s3cret"}},
	{"a password in the query after an option that parses", "redis://127.0.0.1:1/0?db=0&password=Qz9s3cret", []string{"Qz9s3cret"}},
}

// leaks returns the secret, or the run of 4 of its bytes, that msg holds.
func leaks(msg string, secrets []string) string {
	for _, s := range secrets {
		for i := 0; i+4 <= len(s); i++ {
			if strings.Contains(msg, s[i:i+4]) {
				return s[i : i+4]
			}
		}
	}
	return ""
}

func TestNoMessageHoldsAPassword(t *testing.T) {
	for _, c := range passwordCases {
		t.Run(c.desc, func(t *testing.T) {
			var msg string
			if c.url == "" {
				_, err := parseRedis("", "--redis", "redis://alice:AlicePw#42@127.0.0.1:1,127.0.0.1:2", "", time.Second)
				if err == nil {
					t.Skip("parses")
				}
				msg = err.Error()
			} else if _, err := parseRedis(c.url, "--redis", "", "", time.Second); err != nil {
				msg = err.Error()
			} else {
				msg = "parsed"
			}
			msg += " " + redactURL(c.url)
			if l := leaks(msg, c.secrets); l != "" {
				t.Errorf("%q holds %q", msg, l)
			}
		})
	}
}

func TestAPasswordWithAnUnescapedCharacterIsRefused(t *testing.T) {
	for _, raw := range []string{
		"redis://alice:AlicePw#42@127.0.0.1:6379",
		"redis://alice:AlicePw/42@127.0.0.1:6379",
		"redis://alice:AlicePw?42@127.0.0.1:6379",
	} {
		_, err := parseRedis(raw, "--redis", "", "", time.Second)
		if err == nil || !strings.Contains(err.Error(), "--redis redis://xxxxx@127.0.0.1:6379: the user name or password does not parse") {
			t.Errorf("%s: %v", raw, err)
		}
	}
	// An unescaped '@' is read as URL parsers do, up to the last one.
	if cfg, err := parseRedis("redis://alice:AlicePw@42@127.0.0.1:6379", "--redis", "", "", time.Second); err != nil || cfg.single.Password != "AlicePw@42" {
		t.Errorf("an unescaped @: %+v, %v", cfg, err)
	}
	cfg, err := parseRedis("redis://alice:AlicePw%2342@127.0.0.1:6379/2", "--redis", "", "", time.Second)
	if err != nil || cfg.single.Password != "AlicePw#42" || cfg.single.Username != "alice" || cfg.display != "redis://127.0.0.1:6379/2" {
		t.Errorf("an escaped password: %+v, %v", cfg, err)
	}
}

func TestTheCommandScrubsThePasswordFromEveryMessage(t *testing.T) {
	t.Parallel()
	for _, c := range passwordCases {
		if c.url == "" {
			continue
		}
		for _, env := range []bool{false, true} {
			var r result
			if env {
				r = admitqEnv(t, map[string]string{"ADMITQ_REDIS": c.url}, "quota", "list")
			} else {
				r = admitq(t, "--redis", c.url, "quota", "list")
			}
			if l := leaks(r.stdout+r.stderr, c.secrets); l != "" || r.code == 0 {
				t.Errorf("%s (env %v): exit %d, output holds %q:\n%v", c.desc, env, r.code, l, r)
			}
		}
	}
}

func TestURLSecretsCoverEveryReading(t *testing.T) {
	got := urlSecrets("redis://alice:AlicePw/42@host:1")
	for _, want := range []string{"alice:AlicePw/42", "AlicePw/42"} {
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("urlSecrets = %q, want %q among them", got, want)
		}
	}
	if got := redactURL("alice:AlicePw%2342@host:1"); got != "xxxxx@host:1" {
		t.Errorf("redactURL of host:port form = %q", got)
	}
}
