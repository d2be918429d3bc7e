package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// statusOf runs status with args and decodes its JSON.
func statusOf(t *testing.T, base []string, args ...string) statusReport {
	t.Helper()
	out := mustRun(t, append(append(slices.Clone(base), "status", "--json"), args...)...).stdout
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("status --json %v does not parse: %v\n%s", args, err, out)
	}
	return r
}

func tenantNames(r statusReport) []string {
	var names []string
	for _, ts := range r.Tenants {
		names = append(names, ts.Tenant)
	}
	return names
}

// commandCalls returns how many of each command Redis has served.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
		calls[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return calls
}

// TestStatusListing: with no tenant named, status lists the tenants with
// a quota of their own and those on the default with a window in Redis,
// sorted by usage or naturally by name, limited and filtered; named
// tenants are looked up directly, without reading the whole quota hash.
func TestStatusListing(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	base := []string{"--redis", srv.URL()}
	store := admission.NewRedisQuotas(rdb)
	own := admission.Quota{Limit: 4, Window: time.Minute}
	for _, tenant := range []string{"tenant-1", "tenant-2", "tenant-10"} {
		if err := store.Set(ctx, tenant, own); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.SetDefault(ctx, admission.Quota{Limit: 2, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	g := admission.New(rdb, store)
	t.Cleanup(func() { g.Close() })
	for tenant, n := range map[string]int{"tenant-10": 3, "tenant-2": 1, "dflt-5": 2} {
		for range n {
			if _, err := g.Admit(ctx, tenant); err != nil {
				t.Fatal(err)
			}
		}
	}

	for _, c := range []struct {
		desc  string
		args  []string
		want  []string
		total int
	}{
		{"by usage, the default", nil, []string{"dflt-5", "tenant-10", "tenant-2", "tenant-1"}, 4},
		{"by name, naturally", []string{"--sort", "name"}, []string{"dflt-5", "tenant-1", "tenant-2", "tenant-10"}, 4},
		{"limited", []string{"--limit", "2"}, []string{"dflt-5", "tenant-10"}, 4},
		{"limited by name", []string{"--limit", "2", "--sort", "name"}, []string{"dflt-5", "tenant-1"}, 4},
		{"filtered", []string{"--match", "tenant-1*"}, []string{"tenant-10", "tenant-1"}, 2},
		{"filtered on the default", []string{"--match", "d*"}, []string{"dflt-5"}, 1},
		{"nothing matches", []string{"--match", "zz*"}, nil, 0},
		{"a tenant named twice, shown once", []string{"tenant-2", "tenant-1", "tenant-2"}, []string{"tenant-2", "tenant-1"}, 2},
	} {
		t.Run(c.desc, func(t *testing.T) {
			r := statusOf(t, base, c.args...)
			if diff := gocmp.Diff(c.want, tenantNames(r)); diff != "" || r.Total != c.total {
				t.Errorf("status %v: total %d, want %d; tenants (-want,+got):\n%s", c.args, r.Total, c.total, diff)
			}
		})
	}

	r := statusOf(t, base)
	if d := r.Tenants[0]; !d.Default || d.InWindow != 2 || d.Quota == nil || d.Quota.Limit != 2 {
		t.Errorf("dflt-5 = %+v, want 2 in its window on the default quota of 2", d)
	}
	if d := r.Tenants[3]; d.Default || d.InWindow != 0 || d.Quota == nil || d.Quota.Limit != 4 || d.NextFree == nil {
		t.Errorf("tenant-1 = %+v, want an empty window under its own quota", d)
	}
	text := mustRun(t, append(base, "status", "--limit", "1")...).stdout
	if !strings.Contains(text, "dflt-5") || strings.Contains(text, "tenant-1") || !strings.Contains(text, "and 3 more tenants") {
		t.Errorf("status --limit 1 does not say how many more there are:\n%s", text)
	}

	before := commandCalls(t, rdb)
	r = statusOf(t, base, "tenant-2", "nobody", "tenant-10")
	after := commandCalls(t, rdb)
	if diff := gocmp.Diff([]string{"tenant-2", "nobody", "tenant-10"}, tenantNames(r)); diff != "" {
		t.Errorf("named tenants (-want,+got):\n%s", diff)
	}
	if n := r.Tenants[1]; !n.Default || n.Quota.Limit != 2 {
		t.Errorf("nobody = %+v, want the default quota", n)
	}
	for _, cmd := range []string{"hscan", "hgetall", "scan", "hkeys"} {
		if after[cmd] != before[cmd] {
			t.Errorf("status of named tenants sent %d %s", after[cmd]-before[cmd], cmd)
		}
	}

	for _, args := range [][]string{
		{"status", "--sort", "bogus"},
		{"status", "--limit", "-1"},
		{"status", "acme", "--match", "a*"},
	} {
		if res := admitq(t, append(base, args...)...); res.code != exitUsage {
			t.Errorf("%v: %v\nwant exit %d", args, res, exitUsage)
		}
	}
}

// TestStatusPartialOutput: a tenant whose window or quota cannot be read
// is marked, the others are shown, and status exits 1 saying how many
// failed.
func TestStatusPartialOutput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	base := []string{"--redis", srv.URL()}
	mustRun(t, append(base, "quota", "set-default", "--limit", "3", "--window", "1m")...)
	mustRun(t, append(base, "quota", "set", "fine", "--limit", "3", "--window", "1m")...)
	// A log that is not a sorted set, and a quota written by hand.
	if err := rdb.Set(ctx, "admitq:{broken}:log", "x", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "admitq:quotas", "garbled", "{").Err(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"status", "--sort", "name"}, {"status", "fine", "broken", "garbled"}} {
		res := admitq(t, append(base, args...)...)
		if res.code != exitFailure || !strings.Contains(res.stderr, "2 of 3 tenants could not be read") {
			t.Errorf("%v: %v\nwant exit 1, 2 of 3 tenants not read", args, res)
		}
		for _, want := range []string{"fine", "3/1m0s", "broken", "garbled", "error: ", "WRONGTYPE", "invalid quota"} {
			if !strings.Contains(res.stdout, want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, res.stdout)
			}
		}
	}
	res := admitq(t, append(base, "status", "--json")...)
	var r statusReport
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil || res.code != exitFailure {
		t.Fatalf("status --json: %v, %v", res, err)
	}
	if diff := gocmp.Diff([]string{"fine", "broken", "garbled"}, tenantNames(r)); diff != "" {
		t.Errorf("status --json tenants (-want,+got):\n%s", diff)
	}
	if r.Tenants[0].Error != "" || r.Tenants[1].Error == "" || r.Tenants[2].Error == "" {
		t.Errorf("status --json errors: %+v", r.Tenants)
	}
}

// TestStatusShortensLongNames: a 256-byte tenant name ends in an ellipsis
// in the table and leaves the other columns where they were; --json has it
// whole.
func TestStatusShortensLongNames(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	long := strings.Repeat("é", 100) + strings.Repeat("x", 56) // 256 bytes
	mustRun(t, append(base, "quota", "set", long, "--limit", "3", "--window", "1m")...)
	mustRun(t, append(base, "quota", "set", "short", "--limit", "3", "--window", "1m")...)

	text := mustRun(t, append(base, "status")...).stdout
	if strings.Contains(text, long) || !strings.Contains(text, strings.Repeat("é", tableTenantWidth-1)+"…") {
		t.Errorf("status table shows the long name whole, or not shortened to %d:\n%s", tableTenantWidth, text)
	}
	header := strings.Split(text, "\n")[0]
	if col := strings.Index(header, "QUOTA"); col > tableTenantWidth+2 {
		t.Errorf("QUOTA column starts at %d, want at most %d:\n%s", col, tableTenantWidth+2, text)
	}
	if r := statusOf(t, base); !slices.Contains(tenantNames(r), long) {
		t.Errorf("status --json lacks the whole long name: %v", tenantNames(r))
	}
}

// TestStatusAt100kTenants: status of 100k tenants, each with entries in
// its window (half on their own quota, half on the default), with the
// default --limit: batched reads, not a round trip per tenant, and only
// the tenants shown read in full.
func TestStatusAt100kTenants(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := t.Context()
	const n = 100_000
	// Written inside Redis, to keep the test quick: a tenant i holds 1 +
	// i%5 entries; the even ones have a quota of 10 + i%7 of their own.
	fill := redis.NewScript(`
local now = redis.call('TIME')
local us = now[1] * 1000000 + now[2]
redis.call('HSET', 'admitq:quotas', '', '{"limit":100,"window":"1h"}')
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) - 1 do
  local t = 'tenant-' .. i
  if i % 2 == 0 then
    redis.call('HSET', 'admitq:quotas', t, '{"limit":' .. (10 + i % 7) .. ',"window":"1h"}')
  end
  local key = 'admitq:{' .. t .. '}:log'
  for j = 0, i % 5 do
    redis.call('ZADD', key, us - j, tostring(j))
  end
  redis.call('PEXPIRE', key, 3600000)
end
return 0`)
	for lo := 0; lo < n; lo += 5000 { // calls short enough for a loaded machine
		if err := fill.Run(ctx, rdb, nil, lo, lo+5000).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	r := statusOf(t, []string{"--redis", srv.URL()})
	took := time.Since(start)
	calls := commandCalls(t, rdb)
	t.Logf("status of %d tenants, --limit %d: %v; Redis served %v", n, defaultStatusLimit, took.Round(time.Millisecond), calls)

	if r.Total != n || len(r.Tenants) != defaultStatusLimit {
		t.Fatalf("status: %d tenants of %d, want %d of %d", len(r.Tenants), r.Total, defaultStatusLimit, n)
	}
	// The fullest hold 5 of 10: tenants 4 + 70k (i%5 == 4, i%7 == 0, even).
	if first := r.Tenants[0]; first.InWindow != 5 || first.Quota.Limit != 10 || first.Tenant != "tenant-14" {
		t.Errorf("first = %+v, want tenant-14 with 5 of 10", first)
	}
	for _, ts := range r.Tenants {
		if ts.Error != "" || ts.InWindow != 5 || ts.Quota.Limit != 10 {
			t.Errorf("%s = %+v, want 5 of 10 like every fullest tenant", ts.Tenant, ts)
		}
	}
	// Script calls: one per tenant shown, sent again by EVAL where Redis
	// had not cached the script yet; each counts twice in its window.
	if calls["evalsha"] > defaultStatusLimit || calls["eval"] > defaultStatusLimit || calls["zcount"] > n+2*defaultStatusLimit ||
		calls["scan"] > n/1000 || calls["hscan"] > n/1000 {
		t.Errorf("status read %d tenants with %v; want a ZCOUNT each, a script call for each one shown, and pages of a thousand", n, calls)
	}
	// 100k round trips, one at a time, took 23s before without the race
	// detector (several times that with it); batched it takes well under
	// 2s on an idle 2-core machine (3s with 20 processes competing for it),
	// 7-14s under -race. The command counts above are the property; the
	// time is only a backstop that a loaded CI machine must not trip.
	if took > 45*time.Second {
		t.Errorf("status of %d tenants took %v", n, took)
	}
}

// TestStatusCapAfterLowering: after a tenant's cap is lowered below the
// tasks it has in flight, the dispatch table shows the quota's cap, as the
// tenant table does, and says the tenant is over it, draining, not that it
// is at a cap that no longer holds.
func TestStatusCapAfterLowering(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	mustRun(t, append(base, "quota", "set", "noisy", "--limit", "100", "--window", "1s", "--max-in-flight", "3")...)
	serveQueue(t, srv)
	for range 3 {
		mustRun(t, append(base, "enqueue", "--tenant", "noisy", "--type", "x")...)
	}
	if text := mustRun(t, append(base, "status")...).stdout; !strings.Contains(text, "3/3 (at cap)") {
		t.Errorf("status before the change:\n%s", text)
	}
	mustRun(t, append(base, "quota", "set", "noisy", "--limit", "100", "--window", "1s", "--max-in-flight", "1")...)
	text := mustRun(t, append(base, "status")...).stdout
	if !strings.Contains(text, "max in flight 1") || !strings.Contains(text, "3/1, over its cap: draining") || strings.Contains(text, "3/3") {
		t.Errorf("status after the cap went from 3 to 1:\n%s", text)
	}
	r := statusOf(t, base)
	if len(r.Dispatch) != 1 || len(r.Dispatch[0].Tenants) != 1 {
		t.Fatalf("dispatch = %+v, want noisy in default", r.Dispatch)
	}
	if n := r.Dispatch[0].Tenants[0]; n.MaxInFlight != 1 || n.InFlight != 3 || !n.OverCap || !n.AtCap {
		t.Errorf("noisy = %+v, want 3 in flight over its cap of 1", n)
	}
	// A cap removed: no cap shown.
	mustRun(t, append(base, "quota", "set", "noisy", "--limit", "100", "--window", "1s")...)
	if n := statusOf(t, base).Dispatch[0].Tenants[0]; n.MaxInFlight != 0 || n.AtCap || n.OverCap {
		t.Errorf("noisy without a cap = %+v", n)
	}
}

func TestFlightOfCap(t *testing.T) {
	for _, c := range []struct {
		inFlight, limit int
		want            string
	}{
		{2, 0, "2"},
		{1, 2, "1/2"},
		{2, 2, "2/2 (at cap)"},
		{3, 1, "3/1, over its cap: draining"},
	} {
		if got := flightOfCap(c.inFlight, c.limit); got != c.want {
			t.Errorf("flightOfCap(%d, %d) = %q, want %q", c.inFlight, c.limit, got, c.want)
		}
	}
}

// TestDrainMeter: on a fake clock, a tenant's drain rate is its parked
// count's fall a second, smoothed by the time between rounds, and its
// estimate the count over the rate; growth is not draining; a tenant that
// leaves and comes back starts afresh.
func TestDrainMeter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	round := func(parked map[string]int) []dispatchStatus {
		q := dispatchStatus{Queue: "default"}
		for _, tenant := range slices.Sorted(maps.Keys(parked)) {
			q.Tenants = append(q.Tenants, dispatchTenant{Tenant: tenant, Parked: parked[tenant]})
		}
		return []dispatchStatus{q}
	}
	var m drainMeter
	r := round(map[string]int{"a": 100, "b": 5})
	m.observe(t0, r)
	if a := r[0].Tenants[0]; a.DrainRate != nil || a.DrainETA != nil {
		t.Fatalf("first round: a = %+v, want no rate yet", a)
	}

	r = round(map[string]int{"a": 90, "b": 9})
	m.observe(t0.Add(time.Second), r)
	a, b := r[0].Tenants[0], r[0].Tenants[1]
	if a.DrainRate == nil || *a.DrainRate != 10 || a.DrainETA == nil || *a.DrainETA != 9 {
		t.Fatalf("second round: a = %+v, want 10/s, 9s", a)
	}
	if b.DrainRate == nil || *b.DrainRate != -4 || b.DrainETA != nil {
		t.Errorf("second round: b = %+v, want -4/s and no estimate", b)
	}

	r = round(map[string]int{"a": 86})
	m.observe(t0.Add(3*time.Second), r)
	a = r[0].Tenants[0]
	alpha := 1 - math.Exp(-2.0/5)
	wantRate := 10 + alpha*(2-10)
	if a.DrainRate == nil || math.Abs(*a.DrainRate-wantRate) > 1e-9 || math.Abs(*a.DrainETA-86/wantRate) > 1e-9 {
		t.Errorf("third round: a = %+v, want %.4f/s, %.4fs", a, wantRate, 86/wantRate)
	}

	r = round(map[string]int{"a": 80, "b": 9})
	m.observe(t0.Add(4*time.Second), r)
	if b := r[0].Tenants[1]; b.DrainRate != nil {
		t.Errorf("b back after a round away = %+v, want no rate yet", b)
	}

	var buf strings.Builder
	rep := statusReport{Dispatch: r}
	rep.Dispatch[0].Tenants[1].DrainRate = new(float64)
	writeDispatch(&buf, rep)
	text := buf.String()
	for _, want := range []string{"DRAIN", "EMPTY IN", fmt.Sprintf("%.1f/s", *r[0].Tenants[0].DrainRate), "~11s", "0.0/s", "not draining"} {
		if !strings.Contains(text, want) {
			t.Errorf("the table lacks %q:\n%s", want, text)
		}
	}
	buf.Reset()
	writeDispatch(&buf, statusReport{Dispatch: round(map[string]int{"a": 1})})
	if strings.Contains(buf.String(), "DRAIN") {
		t.Errorf("without rates the table has a DRAIN column:\n%s", buf.String())
	}
	if got := drainETAText(dispatchTenant{}); got != "none parked" {
		t.Errorf("drainETAText with none parked = %q", got)
	}
}

func TestRoughDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		300 * time.Millisecond:          "<1s",
		59400 * time.Millisecond:        "59s",
		80 * time.Second:                "1m20s",
		84 * time.Second:                "1m20s",
		10*time.Minute + 20*time.Second: "10m",
		3*time.Hour + 4*time.Minute:     "3h4m",
		time.Hour:                       "1h",
		25*time.Hour + 10*time.Minute:   "25h",
	} {
		if got := roughDuration(d); got != want {
			t.Errorf("roughDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestStatusWatchDrainRates: status --watch on a real redis-server, with a
// short --interval and a context that ends: its rounds after the first
// carry each parked tenant's drain rate, as JSON and in the table.
func TestStatusWatchDrainRates(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	mustRun(t, append(base, "quota", "set", "noisy", "--limit", "100", "--window", "1s", "--max-in-flight", "1")...)
	serveQueue(t, srv)
	for range 3 {
		mustRun(t, append(base, "enqueue", "--tenant", "noisy", "--type", "x")...)
	}
	watch := func(args ...string) string {
		ctx, cancel := context.WithTimeout(t.Context(), 1200*time.Millisecond)
		defer cancel()
		var out, errb syncBuffer
		a := &app{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
		if code := a.run(ctx, append(append(slices.Clone(base), "status", "--watch", "--interval", "200ms"), args...)); code != 0 {
			t.Fatalf("status --watch %v exited %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	lines := strings.Split(strings.TrimSpace(watch("--json")), "\n")
	if len(lines) < 3 {
		t.Fatalf("status --watch --interval 200ms printed %d rounds in 1.2s, want several", len(lines))
	}
	for i, l := range lines {
		var r statusReport
		if err := json.Unmarshal([]byte(l), &r); err != nil || len(r.Dispatch) != 1 || len(r.Dispatch[0].Tenants) != 1 {
			t.Fatalf("round %d: %v\n%s", i, err, l)
		}
		n := r.Dispatch[0].Tenants[0]
		switch {
		case i == 0 && n.DrainRate != nil:
			t.Errorf("round 1 has a drain rate: %+v", n)
		case i > 0 && (n.DrainRate == nil || *n.DrainRate != 0 || n.DrainETA != nil || n.Parked != 2):
			t.Errorf("round %d: noisy = %+v, want 2 parked, draining at 0/s, no estimate", i+1, n)
		}
	}
	if text := watch(); !strings.Contains(text, "DRAIN") || !strings.Contains(text, "0.0/s") || !strings.Contains(text, "not draining") {
		t.Errorf("status --watch table:\n%s", text)
	}
	for _, args := range [][]string{{"status", "--interval", "1s"}, {"status", "--watch", "--interval", "0s"}, {"status", "--watch", "--interval", "1ns"}} {
		if res := admitq(t, append(base, args...)...); res.code != exitUsage || !strings.Contains(res.stderr, "--interval") {
			t.Errorf("%v: %v, want a usage error naming --interval", args, res)
		}
	}
}

// A tenant with no rate limit shows its window as n/none, not n/-1.
func TestStatusNoLimit(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	if err := admission.NewRedisQuotas(srv.Client(t)).Set(t.Context(), "free", admission.Quota{Limit: admission.NoLimit, Weight: 2}); err != nil {
		t.Fatal(err)
	}
	text := mustRun(t, append(base, "status", "free")...).stdout
	if !strings.Contains(text, "0/none") || strings.Contains(text, "/-1") {
		t.Errorf("status of a tenant with no rate limit:\n%s\nwant its window as 0/none", text)
	}
}
