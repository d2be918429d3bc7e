package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

func TestQuotaRoundTrip(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	r := func(args ...string) result { return mustRun(t, append([]string{"--redis", srv.URL()}, args...)...) }

	if got, want := r("quota", "set", "acme", "--limit", "100", "--window", "1m", "--max-delay", "30s").stdout, "acme: 100/1m0s, max delay 30s\n"; got != want {
		t.Errorf("quota set printed %q, want %q", got, want)
	}
	r("quota", "set", "globex", "--limit", "5", "--window", "1s")
	// Names that could pass for the default's row, or for each other.
	r("quota", "set", "(default)", "--limit", "7", "--window", "1s")
	r("quota", "set", `"(default)"`, "--limit", "8", "--window", "1s")
	r("quota", "set-default", "--limit", "10", "--window", "10s")
	if got, want := r("quota", "get", "acme").stdout, "acme: 100/1m0s, max delay 30s\n"; got != want {
		t.Errorf("quota get printed %q, want %q", got, want)
	}

	var got quotaList
	if err := json.Unmarshal([]byte(r("quota", "list", "--json").stdout), &got); err != nil {
		t.Fatal(err)
	}
	want := quotaList{
		Default: &quotaJSON{Limit: 10, Window: "10s", MaxDelay: "0s", Mode: "log", Weight: 1},
		Tenants: []quotaEntry{
			{Tenant: `"(default)"`, Limit: 8, Window: "1s", MaxDelay: "0s", Mode: "log", Weight: 1},
			{Tenant: "(default)", Limit: 7, Window: "1s", MaxDelay: "0s", Mode: "log", Weight: 1},
			{Tenant: "acme", Limit: 100, Window: "1m0s", MaxDelay: "30s", Mode: "log", Weight: 1},
			{Tenant: "globex", Limit: 5, Window: "1s", MaxDelay: "0s", Mode: "log", Weight: 1},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("quota list --json (-want,+got):\n%s", diff)
	}
	table := r("quota", "list").stdout
	for _, line := range []string{
		"TENANT           LIMIT  WINDOW  MAX DELAY  MODE",
		"(default)        10     10s     0s         log",
		`"(default)"      7      1s      0s         log`,
		`"\"(default)\""  8      1s      0s         log`,
		"acme             100    1m0s    30s        log",
		"globex           5      1s      0s         log",
	} {
		if !strings.Contains(table, line+"\n") {
			t.Errorf("quota list lacks the line %q:\n%s", line, table)
		}
	}

	r("quota", "delete", "acme")
	res := admitq(t, "--redis", srv.URL(), "quota", "get", "acme")
	if res.code != exitFailure || !strings.Contains(res.stderr, "the default 10/10s applies") {
		t.Errorf("quota get after delete: %v\nwant exit 1 naming the default", res)
	}
	oneLine(t, "quota get after delete", res.stderr)
	r("quota", "delete-default")
	if err := json.Unmarshal([]byte(r("quota", "list", "--json").stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.Default != nil || len(got.Tenants) != 3 || got.Tenants[2].Tenant != "globex" {
		t.Errorf("after deleting acme and the default, list = %+v, want the two (default)s and globex", got)
	}
}

// TestQuotaCounterMode: --mode counter is stored, shown by get, list and
// status, and the gate enforces it.
func TestQuotaCounterMode(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	base := []string{"--redis", srv.URL()}
	r := func(args ...string) result { return mustRun(t, append(base, args...)...) }

	// One per 10 s, deferred up to 15 s, as in TestEnqueueExitCodes.
	if got, want := r("quota", "set", "bulk", "--limit", "1", "--window", "10s", "--max-delay", "15s", "--mode", "counter").stdout,
		"bulk: 1/10s, max delay 15s, counter\n"; got != want {
		t.Errorf("quota set --mode counter printed %q, want %q", got, want)
	}
	if got, want := r("quota", "set-default", "--limit", "10", "--window", "1s", "--mode", "counter").stdout, "default: 10/1s, counter\n"; got != want {
		t.Errorf("quota set-default --mode counter printed %q, want %q", got, want)
	}
	r("quota", "set", "acme", "--limit", "5", "--window", "1s", "--mode", "log")
	if raw := rdb.HGet(t.Context(), "admitq:quotas", "bulk").Val(); !strings.Contains(raw, `"mode":"counter"`) {
		t.Errorf("stored quota %q lacks the mode", raw)
	}
	if raw := rdb.HGet(t.Context(), "admitq:quotas", "acme").Val(); strings.Contains(raw, "mode") {
		t.Errorf("stored log quota %q names a mode; log is the default and is left out", raw)
	}

	if got, want := r("quota", "get", "bulk").stdout, "bulk: 1/10s, max delay 15s, counter\n"; got != want {
		t.Errorf("quota get printed %q, want %q", got, want)
	}
	var entry quotaEntry
	if err := json.Unmarshal([]byte(r("quota", "get", "bulk", "--json").stdout), &entry); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(quotaEntry{Tenant: "bulk", Limit: 1, Window: "10s", MaxDelay: "15s", Mode: "counter", Weight: 1}, entry); diff != "" {
		t.Errorf("quota get --json (-want,+got):\n%s", diff)
	}
	var list quotaList
	if err := json.Unmarshal([]byte(r("quota", "list", "--json").stdout), &list); err != nil {
		t.Fatal(err)
	}
	want := quotaList{
		Default: &quotaJSON{Limit: 10, Window: "1s", MaxDelay: "0s", Mode: "counter", Weight: 1},
		Tenants: []quotaEntry{
			{Tenant: "acme", Limit: 5, Window: "1s", MaxDelay: "0s", Mode: "log", Weight: 1},
			{Tenant: "bulk", Limit: 1, Window: "10s", MaxDelay: "15s", Mode: "counter", Weight: 1},
		},
	}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("quota list --json (-want,+got):\n%s", diff)
	}
	table := r("quota", "list").stdout
	for _, line := range []string{
		"(default)  10     1s      0s         counter",
		"acme       5      1s      0s         log",
		"bulk       1      10s     15s        counter",
	} {
		if !strings.Contains(table, line+"\n") {
			t.Errorf("quota list lacks the line %q:\n%s", line, table)
		}
	}

	send := append(base, "enqueue", "--tenant", "bulk", "--type", "x")
	for _, c := range []struct {
		desc   string
		code   int
		prefix string
	}{
		{"a free slot admits the task", exitOK, "admitted: task "},
		{"a full window defers it", exitOK, "deferred until "},
		{"a slot past max-delay rejects it", exitRejected, "rejected, retry after "},
	} {
		res := admitq(t, send...)
		if res.code != c.code || !strings.HasPrefix(res.stdout, c.prefix) || res.stderr != "" {
			t.Errorf("counter mode, %s: %v\nwant exit %d, stdout starting %q, empty stderr", c.desc, res, c.code, c.prefix)
		}
	}
	if n := rdb.Exists(t.Context(), "admitq:{bulk}:cnt").Val(); n != 1 {
		t.Errorf("counter mode: %d keys admitq:{bulk}:cnt, want 1", n)
	}

	var st statusReport
	if err := json.Unmarshal([]byte(r("status", "--json", "bulk", "initech").stdout), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Tenants) != 2 || st.Tenants[0].Quota == nil || st.Tenants[1].Quota == nil {
		t.Fatalf("status --json bulk initech = %+v, want two tenants with quotas", st.Tenants)
	}
	if b := st.Tenants[0]; b.Quota.Mode != "counter" || b.InWindow != 1 || b.Reserved != 1 || b.Default {
		t.Errorf("status bulk = %+v, quota %+v; want counter mode, 1 in the window, 1 ahead", b, *b.Quota)
	}
	if i := st.Tenants[1]; i.Quota.Mode != "counter" || !i.Default {
		t.Errorf("status initech = %+v, quota %+v; want the counter-mode default", i, *i.Quota)
	}
	text := r("status", "bulk", "acme", "initech").stdout
	for _, s := range []string{"1/10s, max delay 15s, counter ", "10/1s, counter (default)", "5/1s "} {
		if !strings.Contains(text, s) {
			t.Errorf("status lacks %q:\n%s", s, text)
		}
	}
	if strings.Contains(text, ", log") {
		t.Errorf("status names log mode, the default:\n%s", text)
	}

	// Back to log mode: the quota no longer names a mode.
	if got, want := r("quota", "set", "bulk", "--limit", "1", "--window", "10s").stdout, "bulk: 1/10s\n"; got != want {
		t.Errorf("quota set back to log printed %q, want %q", got, want)
	}
	if err := json.Unmarshal([]byte(r("quota", "get", "bulk", "--json").stdout), &entry); err != nil {
		t.Fatal(err)
	}
	if entry.Mode != "log" {
		t.Errorf("quota get --json after set without --mode: mode %q, want log", entry.Mode)
	}
}

func TestEnqueueExitCodes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	// One per 10 s, deferred up to 15 s: the second task is deferred by
	// about 10 s, the third would be by 20 s and is rejected.
	mustRun(t, append(base, "quota", "set", "acme", "--limit", "1", "--window", "10s", "--max-delay", "15s")...)
	send := append(base, "enqueue", "--tenant", "acme", "--type", "email:send", "--payload", `{"to":"a@example.com"}`)

	for _, c := range []struct {
		desc   string
		code   int
		prefix string
	}{
		{"a free slot admits the task", exitOK, "admitted: task "},
		{"a full window defers it to the next free slot", exitOK, "deferred until "},
		{"a slot past max-delay rejects it", exitRejected, "rejected, retry after "},
	} {
		res := admitq(t, send...)
		if res.code != c.code || !strings.HasPrefix(res.stdout, c.prefix) || res.stderr != "" {
			t.Errorf("%s: %v\nwant exit %d, stdout starting %q, empty stderr", c.desc, res, c.code, c.prefix)
		}
	}

	// The task ID makes a retry idempotent: it takes no second slot.
	mustRun(t, append(base, "quota", "set", "globex", "--limit", "1", "--window", "10s")...)
	withID := append(base, "enqueue", "--tenant", "globex", "--type", "x", "--id", "order-42", "--queue", "low")
	if res := mustRun(t, withID...); res.stdout != "admitted: task order-42 in queue low\n" {
		t.Errorf("enqueue --id: stdout %q", res.stdout)
	}
	if res := admitq(t, withID...); res.code != exitFailure || !strings.Contains(res.stderr, "order-42") {
		t.Errorf("enqueue of a task ID already in the queue: %v\nwant exit 1 naming the ID", res)
	}

	if res := admitq(t, append(base, "enqueue", "--tenant", "nobody", "--type", "x")...); res.code != exitFailure || !strings.Contains(res.stderr, "no quota") {
		t.Errorf("enqueue for a tenant without a quota: %v\nwant exit 1, no quota", res)
	}

	// A capped tenant's task in a queue no worker with a gate serves goes
	// in uncapped: the command says so as it says its other warnings, in
	// one line without a time.
	mustRun(t, append(base, "quota", "set", "capped", "--limit", "10", "--window", "1s", "--max-in-flight", "2")...)
	res := mustRun(t, append(base, "enqueue", "--tenant", "capped", "--type", "x", "--queue", "q1")...)
	want := "admitq: warning: no worker with a Gate serves this queue, so tasks go in uncapped"
	if !strings.HasPrefix(res.stderr, want) || !strings.HasSuffix(res.stderr, "(queue=q1, tenant=capped)\n") || strings.Count(res.stderr, "\n") != 1 {
		t.Errorf("enqueue of a capped tenant's task with no worker: stderr %q, want one line %q...", res.stderr, want)
	}
}

func TestStatusJSON(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	mustRun(t, append(base, "quota", "set", "acme", "--limit", "2", "--window", "10s", "--max-delay", "20s")...)
	mustRun(t, append(base, "quota", "set", "globex", "--limit", "5", "--window", "1s")...)
	for range 3 { // two admitted, one deferred
		mustRun(t, append(base, "enqueue", "--tenant", "acme", "--type", "x")...)
	}

	var got statusReport
	out := mustRun(t, append(base, "status", "--json")...).stdout
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("status --json does not parse: %v\n%s", err, out)
	}
	if len(got.Tenants) != 2 || got.Tenants[0].Tenant != "acme" || got.Tenants[1].Tenant != "globex" {
		t.Fatalf("status --json tenants = %+v, want acme and globex", got.Tenants)
	}
	acme := got.Tenants[0]
	if acme.InWindow != 2 || acme.Reserved != 1 || acme.Quota == nil || acme.Quota.Limit != 2 || acme.Default {
		t.Errorf("acme = %+v, want 2 in the window, 1 reserved ahead, its own quota of 2", acme)
	}
	if acme.NextFree == nil || !acme.NextFree.After(got.Time) {
		t.Errorf("acme next free = %v, want after now %v", acme.NextFree, got.Time)
	}
	want := []queueStatus{{Queue: "default", Pending: 2, Scheduled: 1}}
	if diff := cmp.Diff(want, got.Queues); diff != "" {
		t.Errorf("queues (-want,+got):\n%s", diff)
	}

	// Named tenants: one on the default, one with no quota at all.
	mustRun(t, append(base, "quota", "set-default", "--limit", "7", "--window", "1s")...)
	out = mustRun(t, append(base, "status", "--json", "initech")...).stdout
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Tenants) != 1 || !got.Tenants[0].Default || got.Tenants[0].Quota.Limit != 7 {
		t.Errorf("status initech = %+v, want the default quota of 7", got.Tenants)
	}

	text := mustRun(t, append(base, "status")...).stdout
	for _, s := range []string{"acme", "2/2", "QUEUE", "default"} {
		if !strings.Contains(text, s) {
			t.Errorf("status lacks %q:\n%s", s, text)
		}
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	base := []string{"--redis-cluster", strings.Join(cl.Addrs(), ",")}
	mustRun(t, append(base, "quota", "set", "acme", "--limit", "1", "--window", "10s", "--max-delay", "15s")...)
	mustRun(t, append(base, "quota", "set", "globex", "--limit", "1", "--window", "10s")...)
	for _, c := range []struct {
		tenant, prefix string
		code           int
	}{
		{"acme", "admitted", exitOK},
		{"acme", "deferred until", exitOK},
		{"acme", "rejected", exitRejected},
		{"globex", "admitted", exitOK},
	} {
		res := admitq(t, append(base, "enqueue", "--tenant", c.tenant, "--type", "x")...)
		if res.code != c.code || !strings.HasPrefix(res.stdout, c.prefix) {
			t.Errorf("enqueue %s on a cluster: %v\nwant exit %d, %s", c.tenant, res, c.code, c.prefix)
		}
	}
	var got statusReport
	if err := json.Unmarshal([]byte(mustRun(t, append(base, "status", "--json")...).stdout), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Tenants) != 2 || got.Tenants[0].InWindow != 1 || got.Tenants[0].Reserved != 1 || got.Tenants[1].InWindow != 1 {
		t.Errorf("status on a cluster: %+v", got.Tenants)
	}
	if diff := cmp.Diff([]queueStatus{{Queue: "default", Pending: 2, Scheduled: 1}}, got.Queues); diff != "" {
		t.Errorf("queues on a cluster (-want,+got):\n%s", diff)
	}
}

func TestStatusWatchRedrawsUntilInterrupted(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	mustRun(t, "--redis", srv.URL(), "quota", "set", "acme", "--limit", "3", "--window", "1s")
	ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
	defer cancel()
	var out, errb syncBuffer
	a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
	if code := a.run(ctx, []string{"--redis", srv.URL(), "status", "--watch", "--json"}); code != 0 {
		t.Fatalf("status --watch exited %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 2 || len(lines) > 4 {
		t.Fatalf("status --watch --json printed %d lines in 2.5s, want one a second:\n%s", len(lines), out.String())
	}
	for _, l := range lines {
		var r statusReport
		if err := json.Unmarshal([]byte(l), &r); err != nil || len(r.Tenants) != 1 {
			t.Errorf("line %q: %v, %d tenants", l, err, len(r.Tenants))
		}
	}
}

// A running producer picks up a quota changed with admitq quota set within
// a second.
func TestRunningProducerPicksUpAQuotaChange(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	mustRun(t, "--redis", srv.URL(), "quota", "set", "acme", "--limit", "1", "--window", "1m")
	gate := admission.New(rdb, admission.NewRedisQuotas(rdb))
	defer gate.Close()
	for i, want := range []admission.Outcome{admission.Admitted, admission.Rejected} {
		if d, err := gate.Admit(t.Context(), "acme"); err != nil || d.Outcome != want {
			t.Fatalf("admit %d: %v, %v; want %v", i, d.Outcome, err, want)
		}
	}

	mustRun(t, "--redis", srv.URL(), "quota", "set", "acme", "--limit", "100", "--window", "1m")
	changed := time.Now()
	for {
		d, err := gate.Admit(t.Context(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome == admission.Admitted {
			break
		}
		if time.Since(changed) > time.Second {
			t.Fatalf("still %v a second after the quota was raised", d.Outcome)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the raised quota applied after %v", time.Since(changed).Round(time.Millisecond))
}
