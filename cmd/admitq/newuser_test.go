package main

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/admitq/admitq/internal/redistest"
)

// ADMITQ_REDIS means what it means to the examples too: host:port works as
// well as a URL, and an error for its value names it, not --redis.
func TestRedisFromEnvironmentTakesHostPortAndNamesItself(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	env := map[string]string{"ADMITQ_REDIS": srv.Addr()}
	if res := admitqEnv(t, env, "quota", "set", "acme", "--limit", "3", "--window", "1s"); res.code != 0 {
		t.Fatalf("ADMITQ_REDIS=host:port: %v", res)
	}
	if n := srv.Client(t).HLen(t.Context(), "admitq:quotas").Val(); n != 1 {
		t.Errorf("ADMITQ_REDIS=host:port: %d quotas in its server, want 1", n)
	}
	if res := admitq(t, "--redis", srv.Addr(), "quota", "get", "acme"); res.code != 0 {
		t.Errorf("--redis host:port: %v", res)
	}

	env["ADMITQ_REDIS"] = "redis://alice:hunter2@127.0.0.1:port"
	res := admitqEnv(t, env, "quota", "list")
	if res.code != exitUsage || !strings.Contains(res.stderr, "ADMITQ_REDIS redis://xxxxx@127.0.0.1:port") || strings.Contains(res.stderr, "--redis") {
		t.Errorf("%v\nwant exit 2 naming ADMITQ_REDIS, not --redis", res)
	}
	oneLine(t, "bad ADMITQ_REDIS", res.stderr)
	if strings.Contains(res.stderr, "hunter2") {
		t.Errorf("stderr holds the password: %q", res.stderr)
	}
}

// Deleting a quota that is not there says so, and does not claim it deleted
// anything.
func TestQuotaDeleteOfATenantWithoutAQuota(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	res := admitq(t, "--redis", srv.URL(), "quota", "delete", "acme")
	if res.code != exitFailure || strings.Contains(res.stdout, "deleted") ||
		!strings.Contains(res.stderr, `tenant "acme" has no quota of its own; nothing deleted`) {
		t.Errorf("%v\nwant exit 1 saying nothing was deleted", res)
	}
	oneLine(t, "delete of a missing quota", res.stderr)
	mustRun(t, "--redis", srv.URL(), "quota", "set", "acme", "--limit", "1", "--window", "1s")
	if got := mustRun(t, "--redis", srv.URL(), "quota", "delete", "acme").stdout; got != "acme: deleted\n" {
		t.Errorf("delete of a quota printed %q, want %q", got, "acme: deleted\n")
	}
}

// A 256-byte tenant is cut short with an ellipsis in the table, so it does
// not widen every row, and never in --json.
func TestQuotaListShortensLongTenantsInTablesOnly(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	long := strings.Repeat("t", 256)
	mustRun(t, "--redis", srv.URL(), "quota", "set", long, "--limit", "1", "--window", "1s")
	mustRun(t, "--redis", srv.URL(), "quota", "set", "acme", "--limit", "2", "--window", "1s")

	table := mustRun(t, "--redis", srv.URL(), "quota", "list").stdout
	short := strings.Repeat("t", tableTenantWidth-1) + "…"
	if !strings.Contains(table, short+"  1 ") || strings.Contains(table, long) {
		t.Errorf("quota list does not show %q for the long tenant:\n%s", short, table)
	}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		if n := utf8.RuneCountInString(line); n > tableTenantWidth+40 {
			t.Errorf("a line of %d characters: %q", n, line)
		}
	}

	var l quotaList
	if err := json.Unmarshal([]byte(mustRun(t, "--redis", srv.URL(), "quota", "list", "--json").stdout), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Tenants) != 2 || l.Tenants[1].Tenant != long {
		t.Errorf("quota list --json tenants = %+v, want acme and the whole long name", l.Tenants)
	}
}

func TestVersion(t *testing.T) {
	res := admitq(t, "--version")
	if res.code != 0 || !strings.HasPrefix(res.stdout, "admitq version ") || !strings.Contains(res.stdout, "go1.") {
		t.Errorf("%v\nwant exit 0 and a version line", res)
	}
}
