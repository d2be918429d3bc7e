package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// keyIn reads key's quota straight from Redis, not through the command.
func keyIn(t *testing.T, srv *redistest.Server, key string) (admission.Quota, error) {
	t.Helper()
	return admission.NewRedisQuotas(srv.Client(t)).GetKey(t.Context(), key)
}

// key set, update, get, list, pause, resume and delete, each checked
// against what Redis holds.
func TestKeyCommands(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	run := func(args ...string) result { return admitq(t, append([]string{"--redis", srv.URL()}, args...)...) }
	check := func(what, key string, want admission.Quota) {
		t.Helper()
		got, err := keyIn(t, srv, key)
		if err != nil || got != want {
			t.Errorf("%s: %s holds %+v, %v; want %+v", what, key, got, err, want)
		}
	}

	if r := run("key", "set", "api:stripe", "--max-in-flight", "10"); r.code != 0 || r.stdout != "api:stripe: max in flight 10\n" {
		t.Errorf("key set: %v", r)
	}
	check("key set", "api:stripe", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 10})
	if r := run("key", "set", "api:mail", "--max-in-flight", "2", "--limit", "none"); r.code != 0 {
		t.Errorf("key set --limit none: %v", r)
	}

	if r := run("key", "pause", "api:stripe"); r.code != 0 || r.stdout != "api:stripe: paused: max in flight 10, paused\n" {
		t.Errorf("key pause: %v", r)
	}
	check("key pause", "api:stripe", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 10, Paused: true})
	if r := run("key", "pause", "api:stripe"); r.code != 0 || !strings.HasPrefix(r.stdout, "api:stripe: already paused") {
		t.Errorf("key pause again: %v", r)
	}
	// update and set keep the pause.
	if r := run("key", "update", "api:stripe", "--max-in-flight", "20"); r.code != 0 || r.stdout != "api:stripe: max in flight 20, paused\n" {
		t.Errorf("key update: %v", r)
	}
	check("key update", "api:stripe", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 20, Paused: true})

	if r := run("key", "get", "api:stripe"); r.code != 0 || r.stdout != "api:stripe: max in flight 20, paused\n" {
		t.Errorf("key get: %v", r)
	}
	var entry keyEntry
	if err := json.Unmarshal([]byte(run("key", "get", "api:stripe", "--json").stdout), &entry); err != nil ||
		entry != (keyEntry{Key: "api:stripe", MaxInFlight: 20, Paused: true}) {
		t.Errorf("key get --json: %+v, %v", entry, err)
	}
	var list []keyEntry
	if err := json.Unmarshal([]byte(run("key", "list", "--json").stdout), &list); err != nil {
		t.Fatal(err)
	}
	want := []keyEntry{{Key: "api:mail", MaxInFlight: 2}, {Key: "api:stripe", MaxInFlight: 20, Paused: true}}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("key list --json (-want,+got):\n%s", diff)
	}
	table := run("key", "list").stdout
	for _, line := range []string{"KEY         MAX IN FLIGHT  PAUSED", "api:mail    2              -", "api:stripe  20             paused"} {
		if !strings.Contains(table, line+"\n") {
			t.Errorf("key list lacks %q:\n%s", line, table)
		}
	}

	if r := run("key", "resume", "api:stripe"); r.code != 0 || r.stdout != "api:stripe: resumed: max in flight 20\n" {
		t.Errorf("key resume: %v", r)
	}
	check("key resume", "api:stripe", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 20})

	// A key without a quota: pause gives it one, with no cap.
	if r := run("key", "pause", "api:new"); r.code != 0 || r.stdout != "api:new: paused: no cap, paused\n" {
		t.Errorf("key pause of a key without a quota: %v", r)
	}
	check("key pause of a new key", "api:new", admission.Quota{Limit: admission.NoLimit, Paused: true})

	if r := run("key", "delete", "api:stripe"); r.code != 0 || r.stdout != "api:stripe: deleted\n" {
		t.Errorf("key delete: %v", r)
	}
	if _, err := keyIn(t, srv, "api:stripe"); !errors.Is(err, admission.ErrNoQuota) {
		t.Errorf("after key delete: %v", err)
	}
	if r := run("key", "list"); r.code != 0 || strings.Contains(r.stdout, "api:stripe") {
		t.Errorf("key list after delete: %v", r)
	}
}

// Bad input to key commands is one line with its exit code, and nothing
// is written.
func TestKeyCommandsRefuseBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := srv.URL()
	mustRun(t, "--redis", url, "key", "set", "api:mail", "--max-in-flight", "2")
	for _, c := range []struct {
		desc string
		args []string
		code int
		want string
	}{
		{"set without a cap", []string{"set", "api:x"}, exitUsage, "--max-in-flight is required"},
		{"a negative cap", []string{"set", "api:x", "--max-in-flight", "-1"}, exitUsage, "--max-in-flight -1: want 0 (no cap) or more"},
		{"a rate limit", []string{"set", "api:x", "--max-in-flight", "1", "--limit", "5"}, exitUsage, "--limit 5: a key has no rate limit of its own"},
		{"no KEY", []string{"set", "--max-in-flight", "1"}, exitUsage, "key set: KEY is missing"},
		{"a bad key", []string{"set", "api\x01x", "--max-in-flight", "1"}, exitUsage, "invalid key"},
		{"an empty key", []string{"get", ""}, exitUsage, "invalid key"},
		{"update of a key without a quota", []string{"update", "api:x", "--max-in-flight", "3"}, exitFailure, `key "api:x" has no quota to update; key set api:x gives it one`},
		{"get of a key without a quota", []string{"get", "api:x"}, exitFailure, `key "api:x" has no quota: it is unlimited`},
		{"delete of a key without a quota", []string{"delete", "api:x"}, exitFailure, `key "api:x" has no quota; nothing deleted`},
		{"resume of a key without a quota", []string{"resume", "api:x"}, exitFailure, `key "api:x" has no quota, so it is not paused`},
		{"no command", nil, exitUsage, "key needs a command: delete, get, list, pause, resume, set, update"},
	} {
		r := admitq(t, append([]string{"--redis", url, "key"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: %v, want exit %d and %q", c.desc, r, c.code, c.want)
		}
		oneLine(t, c.desc, r.stderr)
	}
	all, err := admission.NewRedisQuotas(srv.Client(t)).ListKeys(t.Context())
	if err != nil || len(all) != 1 || all["api:mail"] != (admission.Quota{Limit: admission.NoLimit, MaxInFlight: 2}) {
		t.Errorf("keys after refused commands: %v, %v", all, err)
	}
}
