package main

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/admitq/admitq/internal/redistest"
)

// TestQuotaDeleteAndDeleteDefaultAgreeOnAMissingEntry: both refuse a
// missing entry with exit 1 and "nothing deleted", both delete an entry
// that is there, and both delete one that does not decode.
func TestQuotaDeleteAndDeleteDefaultAgreeOnAMissingEntry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	base := []string{"--redis", srv.URL()}
	run := func(args ...string) result { return admitq(t, append(base, args...)...) }

	for _, c := range []struct{ desc, want string }{
		{"delete", `tenant "acme" has no quota of its own; nothing deleted`},
		{"delete-default", "there is no default quota; nothing deleted"},
	} {
		args := []string{"quota", c.desc}
		if c.desc == "delete" {
			args = append(args, "acme")
		}
		res := run(args...)
		if res.code != exitFailure || res.stdout != "" || !strings.Contains(res.stderr, c.want) {
			t.Errorf("quota %s of a missing entry: %v\nwant exit 1 and %q", c.desc, res, c.want)
		}
		oneLine(t, "quota "+c.desc, res.stderr)
	}

	mustRun(t, append(base, "quota", "set-default", "--limit", "1", "--window", "1s")...)
	if got := mustRun(t, append(base, "quota", "delete-default")...).stdout; got != "default: deleted\n" {
		t.Errorf("delete-default printed %q", got)
	}
	// Entries written by hand that do not decode are an error to read
	// (exit 1: nothing on the command line is wrong), and can still be
	// deleted.
	rdb.HSet(t.Context(), "admitq:quotas", "broken", "{not json", "", `{"limit":0}`)
	for _, args := range [][]string{{"quota", "get", "broken"}, {"quota", "list"}, {"quota", "update", "broken", "--weight", "2"}, {"enqueue", "--tenant", "broken", "--type", "x"}} {
		res := run(args...)
		if res.code != exitFailure || !strings.Contains(res.stderr, "invalid quota") {
			t.Errorf("%v over an undecodable quota: %v\nwant exit 1 and invalid quota", args, res)
		}
		oneLine(t, strings.Join(args, " "), res.stderr)
	}
	if got := mustRun(t, append(base, "quota", "delete", "broken")...).stdout; got != "broken: deleted\n" {
		t.Errorf("delete of an undecodable quota printed %q", got)
	}
	if got := mustRun(t, append(base, "quota", "delete-default")...).stdout; got != "default: deleted\n" {
		t.Errorf("delete-default of an undecodable default printed %q", got)
	}
	if n := rdb.HLen(t.Context(), "admitq:quotas").Val(); n != 0 {
		t.Errorf("%d quotas left, want 0", n)
	}
}

// TestEnqueueSaysTheParkedBacklogIsFull: a capped tenant's task that finds
// its parked backlog full is rejected (exit 3) with that reason and a
// retry time of at least a second, not as over its rate.
func TestEnqueueSaysTheParkedBacklogIsFull(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	mustRun(t, append(base, "quota", "set", "noisy", "--limit", "100", "--window", "1ms", "--max-in-flight", "1", "--max-parked", "1")...)
	serveQueue(t, srv)
	send := append(base, "enqueue", "--tenant", "noisy", "--type", "x")
	for _, want := range []string{"admitted: ", "parked: "} {
		if res := mustRun(t, send...); !strings.HasPrefix(res.stdout, want) {
			t.Errorf("stdout %q, want it to start %q", res.stdout, want)
		}
	}
	res := admitq(t, send...)
	const want = "rejected: parked backlog full (the tenant's max parked), retry after 1s (at "
	if res.code != exitRejected || !strings.HasPrefix(res.stdout, want) || !strings.Contains(res.stdout, "raise --max-parked") {
		t.Errorf("%v\nwant exit 3 and stdout starting %q", res, want)
	}
}

// TestQuotaWeight: --weight is stored, shown by set, get, list and --json,
// and 0 reads as 1.
func TestQuotaWeight(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	r := func(args ...string) result { return mustRun(t, append(base, args...)...) }

	if got, want := r("quota", "set", "gold", "--limit", "100", "--window", "1s", "--weight", "3").stdout, "gold: 100/1s, weight 3\n"; got != want {
		t.Errorf("quota set --weight printed %q, want %q", got, want)
	}
	r("quota", "set", "plain", "--limit", "100", "--window", "1s")
	if got, want := r("quota", "get", "gold").stdout, "gold: 100/1s, weight 3\n"; got != want {
		t.Errorf("quota get printed %q, want %q", got, want)
	}
	var entry quotaEntry
	if err := json.Unmarshal([]byte(r("quota", "get", "plain", "--json").stdout), &entry); err != nil || entry.Weight != 1 {
		t.Errorf("quota get --json of a quota without a weight: %+v, %v; want weight 1", entry, err)
	}
	table := r("quota", "list").stdout
	for _, line := range []string{
		"TENANT  LIMIT  WINDOW  MAX DELAY  MODE  WEIGHT",
		"gold    100    1s      0s         log   3",
		"plain   100    1s      0s         log   1",
	} {
		if !strings.Contains(table, line+"\n") {
			t.Errorf("quota list lacks the line %q:\n%s", line, table)
		}
	}
	r("quota", "set", "gold", "--limit", "100", "--window", "1s")
	if table := r("quota", "list").stdout; strings.Contains(table, "WEIGHT") {
		t.Errorf("quota list shows a WEIGHT column when every weight is 1:\n%s", table)
	}
}

// TestQuotaSetWarnsOfASubSecondMaxDelay: the quota is set, and stderr says
// why it will rarely defer and what to choose.
func TestQuotaSetWarnsOfASubSecondMaxDelay(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	res := mustRun(t, "--redis", srv.URL(), "quota", "set", "acme", "--limit", "10", "--window", "1s", "--max-delay", "500ms")
	if res.stdout != "acme: 10/1s, max delay 500ms\n" {
		t.Errorf("stdout %q", res.stdout)
	}
	for _, want := range []string{"admitq: warning: --max-delay 500ms is under a second", "choose 0 to reject at once, or 1s or more"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr %q lacks %q", res.stderr, want)
		}
	}
	oneLine(t, "sub-second max delay", res.stderr)
	if res := mustRun(t, "--redis", srv.URL(), "quota", "set", "acme", "--limit", "10", "--window", "1s", "--max-delay", "2s"); res.stderr != "" {
		t.Errorf("a max delay of 2s warns: %q", res.stderr)
	}
}

func TestVersionOf(t *testing.T) {
	t.Parallel()
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}}
	dirty := append(rev, debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	for _, c := range []struct {
		desc     string
		version  string
		settings []debug.BuildSetting
		want     string
	}{
		{"a tagged module", "v1.2.3", nil, "v1.2.3 (go1.26.0)"},
		{"a tagged module with VCS settings", "v1.2.3", rev, "v1.2.3 (go1.26.0)"},
		{"a checkout", "(devel)", rev, "devel commit 0123456789ab, 2026-12-01T10:00:00Z (go1.26.0)"},
		{"a modified checkout", "v1.2.4-0.20261201100000-0123456789ab+dirty", dirty, "devel commit 0123456789ab, modified, 2026-12-01T10:00:00Z (go1.26.0)"},
		{"a checkout past a tag", "v1.2.4-0.20261201100000-0123456789ab", rev, "devel commit 0123456789ab, 2026-12-01T10:00:00Z (go1.26.0)"},
		{"installed at a commit", "v0.0.0-20261201100000-0123456789ab", nil, "v0.0.0-20261201100000-0123456789ab (go1.26.0)"},
		{"nothing recorded", "(devel)", nil, "devel (go1.26.0)"},
	} {
		bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/admitq/admitq", Version: c.version}, Settings: c.settings}
		if got := versionOf(bi); got != c.want {
			t.Errorf("%s: versionOf = %q, want %q", c.desc, got, c.want)
		}
	}
}
