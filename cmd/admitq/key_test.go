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

// keyQuotaIn reads key's quota straight from Redis, not through the
// command.
func keyQuotaIn(t *testing.T, srv *redistest.Server, key string) (admission.Quota, error) {
	t.Helper()
	return admission.NewRedisQuotas(srv.Client(t)).GetKey(t.Context(), key)
}

// key set, get, list, update and delete a key's quota; update changes
// only the flags given, and set and update keep a pause.
func TestKeyRoundTrip(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := srv.URL()
	run := func(args ...string) result { return admitq(t, append([]string{"--redis", url, "key"}, args...)...) }
	must := func(args ...string) result { return mustRun(t, append([]string{"--redis", url, "key"}, args...)...) }

	if r := must("list"); r.stdout != "no key quotas\n" {
		t.Errorf("key list of none: %v", r)
	}
	for _, c := range []struct {
		desc string
		args []string
		out  string
		want admission.Quota
	}{
		{"set a cap", []string{"set", "api:stripe", "--max-in-flight", "20"}, "api:stripe: max in flight 20\n",
			admission.Quota{Limit: admission.NoLimit, MaxInFlight: 20}},
		{"set again says what it was", []string{"set", "api:stripe", "--max-in-flight", "25"}, "api:stripe: max in flight 25 (was max in flight 20)\n",
			admission.Quota{Limit: admission.NoLimit, MaxInFlight: 25}},
		{"update the cap", []string{"update", "api:stripe", "--max-in-flight", "10"}, "api:stripe: max in flight 10 (was max in flight 25)\n",
			admission.Quota{Limit: admission.NoLimit, MaxInFlight: 10}},
		{"an update that changes nothing", []string{"update", "api:stripe", "--max-in-flight", "10"}, "api:stripe: max in flight 10 (unchanged)\n",
			admission.Quota{Limit: admission.NoLimit, MaxInFlight: 10}},
		{"pause keeps the cap", []string{"pause", "api:stripe"}, "api:stripe: paused: max in flight 10, paused\n",
			admission.Quota{Limit: admission.NoLimit, MaxInFlight: 10, Paused: true}},
		{"pause again", []string{"pause", "api:stripe"}, "api:stripe: already paused: max in flight 10, paused\n",
			admission.Quota{Limit: admission.NoLimit, MaxInFlight: 10, Paused: true}},
		{"update keeps the pause", []string{"update", "api:stripe", "--max-in-flight", "5"}, "api:stripe: max in flight 5, paused (was max in flight 10, paused)\n",
			admission.Quota{Limit: admission.NoLimit, MaxInFlight: 5, Paused: true}},
		{"set keeps the pause", []string{"set", "api:stripe", "--max-in-flight", "6"}, "api:stripe: max in flight 6, paused (was max in flight 5, paused)\n",
			admission.Quota{Limit: admission.NoLimit, MaxInFlight: 6, Paused: true}},
		{"resume keeps the cap", []string{"resume", "api:stripe"}, "api:stripe: resumed: max in flight 6\n",
			admission.Quota{Limit: admission.NoLimit, MaxInFlight: 6}},
		{"resume again", []string{"resume", "api:stripe"}, "api:stripe: not paused: max in flight 6\n",
			admission.Quota{Limit: admission.NoLimit, MaxInFlight: 6}},
		{"no cap", []string{"update", "api:stripe", "--max-in-flight", "0"}, "api:stripe: no cap (was max in flight 6)\n",
			admission.Quota{Limit: admission.NoLimit}},
	} {
		r := run(c.args...)
		if r.code != 0 || r.stdout != c.out || r.stderr != "" {
			t.Errorf("%s: %v\nwant stdout %q", c.desc, r, c.out)
		}
		got, err := keyQuotaIn(t, srv, "api:stripe")
		if err != nil {
			t.Fatalf("%s: stored: %v", c.desc, err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s: stored quota (-want,+got):\n%s", c.desc, diff)
		}
	}

	must("set", "api:stripe", "--max-in-flight", "20")
	must("set", "db:reports", "--max-in-flight", "3")
	must("pause", "db:reports")
	if got := must("get", "api:stripe").stdout; got != "api:stripe: max in flight 20\n" {
		t.Errorf("key get printed %q", got)
	}
	var entry keyEntry
	if err := json.Unmarshal([]byte(must("get", "db:reports", "--json").stdout), &entry); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(keyEntry{Key: "db:reports", MaxInFlight: 3, Paused: true}, entry); diff != "" {
		t.Errorf("key get --json (-want,+got):\n%s", diff)
	}
	var list keyList
	if err := json.Unmarshal([]byte(must("list", "--json").stdout), &list); err != nil {
		t.Fatal(err)
	}
	want := keyList{Keys: []keyEntry{{Key: "api:stripe", MaxInFlight: 20}, {Key: "db:reports", MaxInFlight: 3, Paused: true}}}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("key list --json (-want,+got):\n%s", diff)
	}
	table := must("list").stdout
	for _, line := range []string{
		"KEY         MAX IN FLIGHT  PAUSED",
		"api:stripe  20             -",
		"db:reports  3              paused",
	} {
		if !strings.Contains(table, line+"\n") {
			t.Errorf("key list lacks the line %q:\n%s", line, table)
		}
	}
	// Keys and tenants are apart: a key's quota is no tenant's.
	if _, err := quotaIn(t, srv, "api:stripe"); !errors.Is(err, admission.ErrNoQuota) {
		t.Errorf("a key's quota shows as a tenant's: %v", err)
	}

	if r := must("delete", "api:stripe"); r.stdout != "api:stripe: deleted\n" {
		t.Errorf("key delete: %v", r)
	}
	if _, err := keyQuotaIn(t, srv, "api:stripe"); !errors.Is(err, admission.ErrNoQuota) {
		t.Errorf("after delete: %v, want no quota", err)
	}
	for _, c := range []struct {
		desc string
		args []string
		want string
	}{
		{"get of a key without a quota", []string{"get", "api:stripe"}, `key "api:stripe" has no quota: it is unlimited`},
		{"delete of a key without a quota", []string{"delete", "api:stripe"}, `key "api:stripe" has no quota; nothing deleted`},
		{"update of a key without a quota", []string{"update", "api:stripe", "--max-in-flight", "2"}, `key "api:stripe" has no quota to update; key set api:stripe gives it one; nothing written`},
		{"resume of a key without a quota", []string{"resume", "api:stripe"}, `key "api:stripe" has no quota, so it is not paused; nothing changed`},
	} {
		r := run(c.args...)
		if r.code != exitFailure || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: %v, want exit 1 and %q", c.desc, r, c.want)
		}
		oneLine(t, c.desc, r.stderr)
	}
	if _, err := keyQuotaIn(t, srv, "api:stripe"); !errors.Is(err, admission.ErrNoQuota) {
		t.Errorf("a refused command wrote a quota: %v", err)
	}

	// Pausing a key without a quota gives it one, paused, with no cap.
	r := run("pause", "api:stripe")
	if r.code != 0 || r.stdout != "api:stripe: paused: no cap, paused\n" ||
		r.stderr != "admitq: note: api:stripe had no quota: it now has one with no cap, paused; key delete api:stripe makes it unlimited again\n" {
		t.Errorf("pause of a key without a quota: %v", r)
	}
	if got, err := keyQuotaIn(t, srv, "api:stripe"); err != nil || got != (admission.Quota{Limit: admission.NoLimit, Paused: true}) {
		t.Errorf("after pause of a key without a quota: %v, %v", got, err)
	}
}

// Bad input to the key commands is a usage error in one line that names
// what was wrong, and nothing is written to Redis.
func TestKeyRefusesBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	url := srv.URL()
	long := strings.Repeat("k", admission.MaxKeyLen+1)
	for _, c := range []struct {
		desc string
		args []string
		want string
	}{
		{"an empty key", []string{"set", "", "--max-in-flight", "2"}, "invalid key: empty"},
		{"a key with a control character", []string{"set", "api\x01stripe", "--max-in-flight", "2"}, "holds control character U+0001"},
		{"a key with a newline", []string{"pause", "api\nstripe"}, "invalid key"},
		{"a key over 256 bytes", []string{"set", long, "--max-in-flight", "2"}, "257 bytes, the limit is 256"},
		{"a key not UTF-8", []string{"delete", "\xff"}, "not valid UTF-8"},
		{"a negative cap", []string{"set", "api:stripe", "--max-in-flight", "-1"}, "--max-in-flight -1: want 0 (no cap) or more"},
		{"a cap past the bound", []string{"set", "api:stripe", "--max-in-flight", "2000000000"}, "--max-in-flight 2000000000: want at most 1073741824"},
		{"a cap not a number", []string{"set", "api:stripe", "--max-in-flight", "lots"}, `invalid argument "lots" for "--max-in-flight"`},
		{"a rate limit", []string{"set", "api:stripe", "--max-in-flight", "2", "--limit", "100"}, "--limit: a key's quota has no such field: it only caps (--max-in-flight) and pauses (key pause)"},
		{"no rate limit either", []string{"set", "api:stripe", "--limit", "none"}, "--limit: a key's quota has no such field"},
		{"a window", []string{"update", "api:stripe", "--window", "1s"}, "--window: a key's quota has no such field"},
		{"a weight", []string{"set", "api:stripe", "--max-in-flight", "2", "--weight", "3"}, "--weight: a key's quota has no such field"},
		{"a parked bound", []string{"update", "api:stripe", "--max-parked", "50"}, "--max-parked: a key's quota has no such field"},
		{"a mode", []string{"set", "api:stripe", "--max-in-flight", "2", "--mode", "counter"}, "--mode: a key's quota has no such field"},
		{"a max delay", []string{"set", "api:stripe", "--max-in-flight", "2", "--max-delay", "1s"}, "--max-delay: a key's quota has no such field"},
		{"set without a cap", []string{"set", "api:stripe"}, "--max-in-flight is required: a number, or 0 for no cap"},
		{"update without a field", []string{"update", "api:stripe"}, "key update api:stripe: give a field to change: --max-in-flight"},
		{"set without a key", []string{"set", "--max-in-flight", "2"}, "key set: KEY is missing"},
		{"get with two keys", []string{"get", "a", "b"}, "key get: want one KEY, got 2 arguments"},
		{"list with a key", []string{"list", "a"}, "key list takes no arguments"},
		{"no command", nil, "key needs a command: delete, get, list, pause, resume, set, update"},
		{"an unknown command", []string{"bogus"}, `unknown command "bogus" for "admitq key"`},
		{"pause with a flag it lacks", []string{"pause", "api:stripe", "--max-in-flight", "2"}, "unknown flag: --max-in-flight"},
	} {
		r := admitq(t, append([]string{"--redis", url, "key"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: %v\nwant exit %d and stderr holding %q", c.desc, r, exitUsage, c.want)
		}
		oneLine(t, c.desc, r.stderr)
		if n, err := rdb.DBSize(t.Context()).Result(); err != nil || n != 0 {
			t.Fatalf("%s: DBSIZE = %d, %v; want nothing written", c.desc, n, err)
		}
	}

	// A key's existing quota is left as it was by refused changes.
	mustRun(t, "--redis", url, "key", "set", "api:stripe", "--max-in-flight", "4")
	for _, args := range [][]string{
		{"update", "api:stripe", "--max-in-flight", "-3"},
		{"update", "api:stripe", "--max-in-flight", "8", "--weight", "2"},
		{"set", "api:stripe", "--max-in-flight", "8", "--limit", "none"},
	} {
		if r := admitq(t, append([]string{"--redis", url, "key"}, args...)...); r.code != exitUsage {
			t.Errorf("key %s: %v, want exit 2", strings.Join(args, " "), r)
		}
	}
	if got, err := keyQuotaIn(t, srv, "api:stripe"); err != nil || got != (admission.Quota{Limit: admission.NoLimit, MaxInFlight: 4}) {
		t.Errorf("after refused changes: %v, %v; want max in flight 4", got, err)
	}
}

// A stored key quota that does not decode is named by get, mended by set,
// and removed by delete.
func TestKeyUndecodableQuota(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	url := srv.URL()
	if err := rdb.HSet(t.Context(), "admitq:keyquotas", "api:stripe", `{"limit":5,"window":"1s"}`).Err(); err != nil {
		t.Fatal(err)
	}
	r := admitq(t, "--redis", url, "key", "get", "api:stripe")
	if r.code == 0 || !strings.Contains(r.stderr, `key "api:stripe"`) || !strings.Contains(r.stderr, "invalid quota") {
		t.Errorf("get of a stored quota that is not a key's: %v", r)
	}
	oneLine(t, "get of a bad quota", r.stderr)
	if r := mustRun(t, "--redis", url, "key", "set", "api:stripe", "--max-in-flight", "2"); r.stdout != "api:stripe: max in flight 2\n" {
		t.Errorf("set over a bad quota: %v", r)
	}
	if got, err := keyQuotaIn(t, srv, "api:stripe"); err != nil || got != (admission.Quota{Limit: admission.NoLimit, MaxInFlight: 2}) {
		t.Errorf("after set over a bad quota: %v, %v", got, err)
	}
	if err := rdb.HSet(t.Context(), "admitq:keyquotas", "api:stripe", `not json`).Err(); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "--redis", url, "key", "delete", "api:stripe")
	if n := rdb.HLen(t.Context(), "admitq:keyquotas").Val(); n != 0 {
		t.Errorf("after delete of a bad quota, the hash holds %d", n)
	}
}

// The key commands' help shows examples and states the semantics.
func TestKeyHelp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"key", "--help"}, []string{"admitq key set api:stripe --max-in-flight 20", "A key without a quota is unlimited", "across all tenants"}},
		{[]string{"key", "set", "--help"}, []string{"admitq key set api:stripe --max-in-flight 20", "--max-in-flight int", "A paused key stays\npaused"}},
		{[]string{"key", "update", "--help"}, []string{"admitq key update api:stripe --max-in-flight 10"}},
		{[]string{"key", "pause", "--help"}, []string{"admitq key pause api:stripe", "Tasks without the key are not held back"}},
		{[]string{"key", "resume", "--help"}, []string{"admitq key resume api:stripe", "keeping its cap"}},
		{[]string{"key", "get", "--help"}, []string{"--json"}},
		{[]string{"key", "list", "--help"}, []string{"--json"}},
		{[]string{"key", "delete", "--help"}, []string{"neither capped nor paused"}},
		{[]string{"--help"}, []string{"key         Set, update, pause, show and delete concurrency keys' quotas"}},
	} {
		r := admitq(t, c.args...)
		if r.code != 0 {
			t.Errorf("%v: %v", c.args, r)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("%v lacks %q:\n%s", c.args, w, r.stdout)
			}
		}
		// The tenant flags a key does not have are hidden.
		if strings.Contains(r.stdout, "--weight") || strings.Contains(r.stdout, "--limit") {
			t.Errorf("%v shows a flag a key's quota does not have:\n%s", c.args, r.stdout)
		}
	}
}
