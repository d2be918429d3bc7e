package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// quotaIn reads tenant's quota straight from Redis, not through the
// command.
func quotaIn(t *testing.T, srv *redistest.Server, tenant string) (admission.Quota, error) {
	t.Helper()
	return admission.NewRedisQuotas(srv.Client(t)).Get(t.Context(), tenant)
}

// quota update changes the fields whose flags are given, and only those.
func TestQuotaUpdateChangesOnlyTheFlagsGiven(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	run := func(args ...string) result { return admitq(t, append([]string{"--redis", srv.URL()}, args...)...) }
	mustRun(t, "--redis", srv.URL(), "quota", "set", "acme", "--limit", "100", "--window", "1m", "--max-delay", "30s",
		"--max-in-flight", "4", "--max-parked", "50", "--weight", "3")

	for _, c := range []struct {
		desc string
		args []string
		want admission.Quota
	}{
		{"a cap", []string{"--max-in-flight", "8"},
			admission.Quota{Limit: 100, Window: time.Minute, MaxDelay: 30 * time.Second, MaxInFlight: 8, MaxParked: 50, Weight: 3}},
		{"a limit alone keeps the window", []string{"--limit", "200"},
			admission.Quota{Limit: 200, Window: time.Minute, MaxDelay: 30 * time.Second, MaxInFlight: 8, MaxParked: 50, Weight: 3}},
		{"no rate limit keeps the rest", []string{"--limit", "none"},
			admission.Quota{Limit: admission.NoLimit, Window: time.Minute, MaxDelay: 30 * time.Second, MaxInFlight: 8, MaxParked: 50, Weight: 3}},
		{"a limit again, and a window", []string{"--limit", "10", "--window", "1s"},
			admission.Quota{Limit: 10, Window: time.Second, MaxDelay: 30 * time.Second, MaxInFlight: 8, MaxParked: 50, Weight: 3}},
		{"no cap, weight 1", []string{"--max-in-flight", "0", "--weight", "1"},
			admission.Quota{Limit: 10, Window: time.Second, MaxDelay: 30 * time.Second, MaxParked: 50, Weight: 1}},
	} {
		r := run(append([]string{"quota", "update", "acme"}, c.args...)...)
		got, err := quotaIn(t, srv, "acme")
		if r.code != 0 || err != nil {
			t.Fatalf("%s: %v; stored: %v", c.desc, r, err)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s: stored quota (-want,+got):\n%s", c.desc, diff)
		}
		if want := "acme: " + c.want.String() + " (was "; !strings.HasPrefix(r.stdout, want) {
			t.Errorf("%s: printed %q, want it to start %q", c.desc, r.stdout, want)
		}
	}
	if r := run("quota", "update", "acme", "--weight", "1"); r.code != 0 || !strings.HasSuffix(r.stdout, "(unchanged)\n") {
		t.Errorf("an update that changes nothing: %v", r)
	}
}

// Bad input to quota update is a usage error in one line, and nothing is
// written; a tenant without a quota of its own is an error (exit 1).
func TestQuotaUpdateRefusesBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	mustRun(t, "--redis", srv.URL(), "quota", "set", "acme", "--limit", "5", "--window", "1s", "--max-in-flight", "2")
	mustRun(t, "--redis", srv.URL(), "quota", "set", "free", "--limit", "none", "--weight", "2")
	for _, c := range []struct {
		desc string
		args []string
		code int
		want string
	}{
		{"no flag", []string{"acme"}, exitUsage, "quota update acme: give a field to change: --limit, --window"},
		{"a bad limit", []string{"acme", "--limit", "ten"}, exitUsage, `--limit "ten": want a whole number, or none for no rate limit`},
		{"limit -1 (none is spelt none)", []string{"acme", "--limit", "-1"}, exitUsage, "--limit -1: want at least 1"},
		{"a bad mode", []string{"acme", "--mode", "fast"}, exitUsage, `--mode "fast": want log or counter`},
		{"a limit with no window to count in", []string{"free", "--limit", "5"}, exitUsage, "--limit 5: the quota has no rate limit, so no window to count in: give --window too"},
		{"a negative weight", []string{"acme", "--weight", "-1"}, exitUsage, "--weight -1"},
		{"no quota of its own", []string{"nobody", "--max-in-flight", "3"}, exitFailure, `tenant "nobody" has no quota of its own to update; quota set nobody gives it one`},
		{"a bad tenant", []string{"ac\x01me", "--weight", "2"}, exitUsage, "invalid tenant"},
	} {
		r := admitq(t, append([]string{"--redis", srv.URL(), "quota", "update"}, c.args...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%s: %v, want exit %d and %q", c.desc, r, c.code, c.want)
		}
		oneLine(t, c.desc, r.stderr)
	}
	if got, err := quotaIn(t, srv, "acme"); err != nil || got != (admission.Quota{Limit: 5, Window: time.Second, MaxInFlight: 2}) {
		t.Errorf("acme after refused updates: %v, %v", got, err)
	}
	if got, err := quotaIn(t, srv, "free"); err != nil || got != (admission.Quota{Limit: admission.NoLimit, Weight: 2}) {
		t.Errorf("free after refused updates: %v, %v", got, err)
	}
	// Counter mode under a cap is no mistake: the dispatcher counts the
	// tenant's tasks in flight itself, whatever the mode.
	if r := admitq(t, "--redis", srv.URL(), "quota", "update", "acme", "--mode", "counter"); r.code != 0 {
		t.Errorf("counter mode under a cap: %v, want it taken", r)
	}
	if got, err := quotaIn(t, srv, "acme"); err != nil || got != (admission.Quota{Limit: 5, Window: time.Second, Mode: admission.Counter, MaxInFlight: 2}) {
		t.Errorf("acme in counter mode under its cap: %v, %v", got, err)
	}
	if _, err := quotaIn(t, srv, "nobody"); err == nil {
		t.Error("quota update wrote a quota for a tenant that had none")
	}
}

// quota set writes the whole quota, and says which fields the tenant had
// set that it resets to their defaults; --limit none needs no window.
func TestQuotaSetNamesWhatItResets(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := srv.URL()
	mustRun(t, "--redis", url, "quota", "set", "acme", "--limit", "5", "--window", "1s", "--max-delay", "2s", "--max-in-flight", "4", "--weight", "3")
	r := mustRun(t, "--redis", url, "quota", "set", "acme", "--limit", "7", "--window", "1s", "--weight", "3")
	want := "admitq: note: acme: set resets what its flags leave out: max delay 2s → 0s, max in flight 4 → none (quota update acme changes only the flags given)\n"
	if r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	if r.stdout != "acme: 7/1s, weight 3\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	// Nothing reset: no note.
	if r := mustRun(t, "--redis", url, "quota", "set", "acme", "--limit", "8", "--window", "1s", "--weight", "3"); r.stderr != "" {
		t.Errorf("a set that resets nothing: stderr %q", r.stderr)
	}
	// A new tenant: no note.
	if r := mustRun(t, "--redis", url, "quota", "set", "new", "--limit", "none", "--weight", "2"); r.stderr != "" || r.stdout != "new: no limit, weight 2\n" {
		t.Errorf("quota set new --limit none --weight 2: %v", r)
	}
	if got, err := quotaIn(t, srv, "new"); err != nil || got != (admission.Quota{Limit: admission.NoLimit, Weight: 2}) {
		t.Errorf("stored %v, %v", got, err)
	}
	r = mustRun(t, "--redis", url, "quota", "set-default", "--limit", "none", "--max-in-flight", "2")
	if r.stdout != "default: no limit, max in flight 2, max parked 10000\n" {
		t.Errorf("set-default --limit none: %v", r)
	}
	r = admitq(t, "--redis", url, "quota", "set", "acme", "--window", "1s")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--limit is required: a number, or none for no rate limit") {
		t.Errorf("set without --limit: %v", r)
	}
}

// quota pause and resume set and clear Paused and keep the rest; a tenant
// without a quota of its own is paused under a copy of the default.
func TestQuotaPauseAndResume(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := srv.URL()
	run := func(args ...string) result { return admitq(t, append([]string{"--redis", url}, args...)...) }
	mustRun(t, "--redis", url, "quota", "set", "acme", "--limit", "5", "--window", "1s", "--max-in-flight", "2")

	if r := run("quota", "pause", "acme"); r.code != 0 || r.stdout != "acme: paused: 5/1s, max in flight 2, max parked 10000, paused\n" {
		t.Errorf("pause: %v", r)
	}
	if got, _ := quotaIn(t, srv, "acme"); got != (admission.Quota{Limit: 5, Window: time.Second, MaxInFlight: 2, Paused: true}) {
		t.Errorf("after pause: %v", got)
	}
	if r := run("quota", "pause", "acme"); r.code != 0 || !strings.HasPrefix(r.stdout, "acme: already paused: ") {
		t.Errorf("pause again: %v", r)
	}
	// set and update keep Paused.
	mustRun(t, "--redis", url, "quota", "update", "acme", "--max-in-flight", "3")
	mustRun(t, "--redis", url, "quota", "set", "acme", "--limit", "6", "--window", "1s")
	if got, _ := quotaIn(t, srv, "acme"); !got.Paused || got.Limit != 6 {
		t.Errorf("after set: %v, want it still paused", got)
	}
	var entry quotaEntry
	if err := json.Unmarshal([]byte(mustRun(t, "--redis", url, "quota", "get", "acme", "--json").stdout), &entry); err != nil || !entry.Paused {
		t.Errorf("quota get --json: %+v, %v", entry, err)
	}
	if table := mustRun(t, "--redis", url, "quota", "list").stdout; !strings.Contains(table, "PAUSED") || !strings.Contains(table, "paused\n") {
		t.Errorf("quota list shows no pause:\n%s", table)
	}
	if r := run("quota", "resume", "acme"); r.code != 0 || r.stdout != "acme: resumed: 6/1s\n" {
		t.Errorf("resume: %v", r)
	}
	if r := run("quota", "resume", "acme"); r.code != 0 || !strings.HasPrefix(r.stdout, "acme: not paused: ") {
		t.Errorf("resume again: %v", r)
	}

	// No quota of its own, no default: refused already, nothing to pause.
	r := run("quota", "pause", "other")
	if r.code != exitFailure || !strings.Contains(r.stderr, `tenant "other" has no quota, and there is no default`) {
		t.Errorf("pause without a default: %v", r)
	}
	if r := run("quota", "resume", "other"); r.code != exitFailure || !strings.Contains(r.stderr, "so it is not paused; nothing changed") {
		t.Errorf("resume without a quota: %v", r)
	}
	if _, err := quotaIn(t, srv, "other"); err == nil {
		t.Error("a refused pause wrote a quota")
	}
	// With a default: a paused copy of it.
	mustRun(t, "--redis", url, "quota", "set-default", "--limit", "9", "--window", "2s")
	r = run("quota", "pause", "other")
	if r.code != 0 || r.stdout != "other: paused: 9/2s, paused\n" || !strings.Contains(r.stderr, "a copy of the default, paused; quota delete other returns it to the default") {
		t.Errorf("pause under the default: %v", r)
	}
	if got, _ := quotaIn(t, srv, "other"); got != (admission.Quota{Limit: 9, Window: 2 * time.Second, Paused: true}) {
		t.Errorf("after pause under the default: %v", got)
	}
}

// A max parked without a cap holds in fair queues, where every tenant's
// tasks wait their turn: quota set, get, list and --json show it.
func TestQuotaShowsMaxParkedWithoutACap(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	set := mustRun(t, "--redis", srv.URL(), "quota", "set", "t2", "--limit", "100", "--window", "1s", "--max-parked", "2")
	if want := "t2: 100/1s, max parked 2\n"; set.stdout != want {
		t.Errorf("quota set printed %q, want %q", set.stdout, want)
	}
	if r := mustRun(t, "--redis", srv.URL(), "quota", "get", "t2"); !strings.Contains(r.stdout, "max parked 2") {
		t.Errorf("quota get: %v, want it to show max parked 2", r)
	}
	var j struct {
		MaxInFlight int `json:"max_in_flight"`
		MaxParked   int `json:"max_parked"`
	}
	r := mustRun(t, "--redis", srv.URL(), "quota", "get", "t2", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil || j.MaxParked != 2 || j.MaxInFlight != 0 {
		t.Errorf("quota get --json: %q (%v), want max_parked 2 and max_in_flight 0", r.stdout, err)
	}
	list := mustRun(t, "--redis", srv.URL(), "quota", "list").stdout
	lines := strings.Split(list, "\n")
	if f := strings.Fields(lines[len(lines)-2]); !strings.HasSuffix(lines[0], "MAX IN FLIGHT  MAX PARKED") || f[0] != "t2" || f[len(f)-2] != "-" || f[len(f)-1] != "2" {
		t.Errorf("quota list:\n%s\nwant a MAX PARKED column with 2 for t2", list)
	}
}

// A quota without a rate limit has no window, delay or mode to set: quota
// update and quota set refuse those flags on it, and write nothing (update
// used to print the unchanged quota "(was" itself).
func TestQuotaWithoutALimitRefusesRateFlags(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := srv.URL()
	mustRun(t, "--redis", url, "quota", "set", "free", "--limit", "none", "--max-in-flight", "2")
	for _, args := range [][]string{
		{"quota", "update", "free", "--window", "1m"},
		{"quota", "update", "free", "--max-delay", "1s"},
		{"quota", "update", "free", "--mode", "counter"},
		{"quota", "set", "other", "--limit", "none", "--window", "1s"},
		{"quota", "update", "free", "--limit", "none", "--window", "1s"},
	} {
		r := admitq(t, append([]string{"--redis", url}, args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "the quota has no rate limit (--limit none)") {
			t.Errorf("%v: %v", args, r)
		}
	}
	if got, err := quotaIn(t, srv, "free"); err != nil || got != (admission.Quota{Limit: admission.NoLimit, MaxInFlight: 2}) {
		t.Errorf("free after: %v, %v", got, err)
	}
	if _, err := quotaIn(t, srv, "other"); err == nil {
		t.Error("quota set wrote other's quota")
	}
	// A limit with its window is still how to give it one.
	if r := mustRun(t, "--redis", url, "quota", "update", "free", "--limit", "10", "--window", "1s"); !strings.HasPrefix(r.stdout, "free: 10/1s") {
		t.Errorf("update to a limit: %v", r)
	}
}
