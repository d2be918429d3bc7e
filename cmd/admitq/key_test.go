package main

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
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

// status lists the stored key quotas after the tenants, text and JSON,
// the first --limit of them in natural order; with none, no section.
func TestStatusShowsKeyQuotas(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	if text := mustRun(t, append(base, "status")...).stdout; strings.Contains(text, "MAX IN FLIGHT  PAUSED") {
		t.Errorf("status without key quotas shows a key table:\n%s", text)
	}
	if r := statusOf(t, base); r.KeyQuotas == nil || len(r.KeyQuotas) != 0 || r.KeyQuotasTotal != 0 {
		t.Errorf("status --json without key quotas: key_quotas %v, total %d; want [] and 0", r.KeyQuotas, r.KeyQuotasTotal)
	}
	for _, k := range []string{"shard-10", "shard-2", "api:stripe"} {
		mustRun(t, append(base, "key", "set", k, "--max-in-flight", "20")...)
	}
	mustRun(t, append(base, "key", "pause", "shard-2")...)
	mustRun(t, append(base, "quota", "set", "acme", "--limit", "5", "--window", "1s")...)

	text := mustRun(t, append(base, "status")...).stdout
	for _, line := range []string{
		"acme",
		"KEY         MAX IN FLIGHT  PAUSED",
		"api:stripe  20             -",
		"shard-2     20             paused",
		"shard-10    20             -",
	} {
		if !strings.Contains(text, line) {
			t.Errorf("status lacks %q:\n%s", line, text)
		}
	}
	r := statusOf(t, base)
	want := []keyEntry{{Key: "api:stripe", MaxInFlight: 20}, {Key: "shard-2", MaxInFlight: 20, Paused: true}, {Key: "shard-10", MaxInFlight: 20}}
	if diff := cmp.Diff(want, r.KeyQuotas); diff != "" || r.KeyQuotasTotal != 3 {
		t.Errorf("status --json key_quotas (-want,+got):\n%s\ntotal %d, want 3", diff, r.KeyQuotasTotal)
	}
	if r := statusOf(t, base, "--limit", "1"); len(r.KeyQuotas) != 1 || r.KeyQuotasTotal != 3 {
		t.Errorf("status --limit 1: key quotas %v of %d, want 1 of 3", r.KeyQuotas, r.KeyQuotasTotal)
	}
	if text := mustRun(t, append(base, "status", "--limit", "1")...).stdout; !strings.Contains(text, "… and 2 more key quotas (admitq key list shows them all)") {
		t.Errorf("status --limit 1 does not say more key quotas are stored:\n%s", text)
	}
}

// A queue's keys become status's rows with the cap and pause of the key's
// quota now, and the table says what holds each.
func TestStatusKeyRows(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	until := now.Add(2500 * time.Millisecond)
	qs := dispatch.QueueStats{Queue: "default", Now: now, Keys: []dispatch.KeyStats{
		{Key: "api:stripe", InFlight: 20, Cap: 20, AtCap: true, Waiting: 7},
		{Key: "api:slow", InFlight: 3, Cap: 3, AtCap: true, Waiting: 1},      // its cap lowered to 1 since
		{Key: "db:reports", Waiting: 4, Paused: true},                        // resumed since
		{Key: "mail", InFlight: 1, Waiting: 2, Held: true, HeldUntil: until}, // no quota: the dispatcher's view
	}}
	quotas := map[string]admission.Quota{
		"api:stripe": {Limit: admission.NoLimit, MaxInFlight: 20},
		"api:slow":   {Limit: admission.NoLimit, MaxInFlight: 1},
		"db:reports": {Limit: admission.NoLimit},
	}
	held := 2.5
	want := []dispatchKey{
		{Key: "api:stripe", Parked: 7, InFlight: 20, MaxInFlight: 20, AtCap: true},
		{Key: "api:slow", Parked: 1, InFlight: 3, MaxInFlight: 1, AtCap: true, OverCap: true},
		{Key: "db:reports", Parked: 4},
		{Key: "mail", Parked: 2, InFlight: 1, Held: true, HeldUntil: &until, HeldFor: &held},
	}
	got := toDispatchKeys(qs, quotas)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("toDispatchKeys (-want,+got):\n%s", diff)
	}

	got[2].Paused = true
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	writeDispatch(tw, statusReport{Dispatch: []dispatchStatus{{Queue: "default", Workers: 1, Tenants: []dispatchTenant{{Tenant: "acme", Parked: 14, Weight: 1}}, Keys: got}}})
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"KEY         PARKED  IN FLIGHT                    HELD",
		"api:stripe  7       20/20 (at cap)               -",
		"api:slow    1       3/1, over its cap: draining  -",
		"db:reports  4       0                            paused",
		"mail        2       1                            held 2.5s (until " + until.Local().Format("15:04:05.000") + ")",
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("the dispatch table lacks the line %q:\n%s", line, b.String())
		}
	}
	if !strings.Contains(b.String(), "TENANT  PARKED") || strings.Index(b.String(), "TENANT") > strings.Index(b.String(), "KEY") {
		t.Errorf("want the tenants, then the keys:\n%s", b.String())
	}

	// At the bound, the table says so.
	many := make([]dispatchKey, dispatch.StatsKeys)
	for i := range many {
		many[i] = dispatchKey{Key: "k" + strconv.Itoa(i)}
	}
	b.Reset()
	writeDispatchKeys(&b, dispatchStatus{Keys: many})
	if !strings.Contains(b.String(), "(status shows at most 100 keys a queue)") {
		t.Errorf("a full key list does not say it is bounded:\n%s", b.String()[len(b.String())-200:])
	}
	if keyHoldText(dispatchKey{Paused: true, Held: true}) != "paused, held" {
		t.Errorf("paused and held: %q", keyHoldText(dispatchKey{Paused: true, Held: true}))
	}
}

// enqueue --key and --priority: the task carries its keys; bad ones are
// a usage error in one line, and nothing is written.
func TestEnqueueKeysAndPriority(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	url := srv.URL()
	base := []string{"--redis", url, "enqueue", "--tenant", "acme", "--type", "x"}
	many := []string{}
	for i := range enqueue.MaxKeys + 1 {
		many = append(many, "--key", "k"+strconv.Itoa(i))
	}
	for _, c := range []struct {
		desc string
		args []string
		want string
	}{
		{"an empty key", []string{"--key", ""}, "admitq: --key: invalid key: empty"},
		{"a key with a control character", []string{"--key", "api\x01stripe"}, "holds control character U+0001"},
		{"a key over 256 bytes", []string{"--key", strings.Repeat("k", admission.MaxKeyLen+1)}, "257 bytes, the limit is 256"},
		{"too many keys", many, "--key: 9 distinct keys, a task may carry at most 8"},
		{"a priority too high", []string{"--priority", "1001"}, "--priority 1001: want -1000 to 1000"},
		{"a priority too low", []string{"--priority", "-1001"}, "--priority -1001: want -1000 to 1000"},
		{"a priority not a number", []string{"--priority", "high"}, `invalid argument "high" for "--priority"`},
	} {
		r := admitq(t, append(slices.Clone(base), c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: %v\nwant exit %d and stderr holding %q", c.desc, r, exitUsage, c.want)
		}
		oneLine(t, c.desc, r.stderr)
		if n, err := rdb.DBSize(t.Context()).Result(); err != nil || n != 0 {
			t.Fatalf("%s: DBSIZE = %d, %v; want nothing written", c.desc, n, err)
		}
	}

	// In a queue no worker with a gate serves, keys and priority hold
	// nothing: the task goes in, carrying its keys (each once).
	mustRun(t, "--redis", url, "quota", "set", "acme", "--limit", "none")
	mustRun(t, "--redis", url, "key", "set", "api:stripe", "--max-in-flight", "1")
	r := mustRun(t, append(slices.Clone(base), "--id", "t1", "--key", "api:stripe", "--key", "db", "--key", "api:stripe", "--priority", "5")...)
	if r.stdout != "admitted: task t1 in queue default\n" {
		t.Errorf("enqueue --key --priority: %v", r)
	}
	info, err := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo("default", "t1")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Headers[enqueue.KeysHeader]; !strings.Contains(got, "api:stripe") || !strings.Contains(got, "db") || strings.Count(got, "api:stripe") != 1 {
		t.Errorf("the task's %s header is %q, want api:stripe and db, each once", enqueue.KeysHeader, got)
	}
}
