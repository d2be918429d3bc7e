package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// TestQuotaDepthFlags sets, shows and lists a capped quota, and refuses
// bad depth flags before writing anything.
func TestQuotaDepthFlags(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := srv.URL()
	r := func(args ...string) result { return mustRun(t, append([]string{"--redis", url}, args...)...) }

	if got, want := r("quota", "set", "noisy", "--limit", "100", "--window", "1s", "--max-in-flight", "4", "--max-parked", "500").stdout,
		"noisy: 100/1s, max in flight 4, max parked 500\n"; got != want {
		t.Errorf("quota set printed %q, want %q", got, want)
	}
	r("quota", "set", "calm", "--limit", "5", "--window", "1s")
	var entry quotaEntry
	if err := json.Unmarshal([]byte(r("quota", "get", "noisy", "--json").stdout), &entry); err != nil {
		t.Fatal(err)
	}
	want := quotaEntry{Tenant: "noisy", Limit: 100, Window: "1s", MaxDelay: "0s", Mode: "log", MaxInFlight: 4, MaxParked: 500, Weight: 1}
	if diff := cmp.Diff(want, entry); diff != "" {
		t.Errorf("quota get --json (-want,+got):\n%s", diff)
	}
	var list quotaList
	if err := json.Unmarshal([]byte(r("quota", "list", "--json").stdout), &list); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]quotaEntry{{Tenant: "calm", Limit: 5, Window: "1s", MaxDelay: "0s", Mode: "log", Weight: 1}, want}, list.Tenants); diff != "" {
		t.Errorf("quota list --json (-want,+got):\n%s", diff)
	}
	table := r("quota", "list").stdout
	for _, line := range []string{
		"TENANT  LIMIT  WINDOW  MAX DELAY  MODE  MAX IN FLIGHT  MAX PARKED",
		"calm    5      1s      0s         log   -              -",
		"noisy   100    1s      0s         log   4              500",
	} {
		if !strings.Contains(table, line+"\n") {
			t.Errorf("quota list lacks the line %q:\n%s", line, table)
		}
	}

	fresh := redistest.Start(t)
	for _, c := range []struct {
		desc string
		args []string
		want string
	}{
		{"negative cap", []string{"--max-in-flight", "-1"}, "--max-in-flight -1"},
		{"negative parked bound", []string{"--max-in-flight", "2", "--max-parked", "-5"}, "--max-parked -5"},
	} {
		args := append([]string{"--redis", fresh.URL(), "quota", "set", "acme", "--limit", "5", "--window", "1s"}, c.args...)
		res := admitq(t, args...)
		if res.code != exitUsage || !strings.Contains(res.stderr, c.want) {
			t.Errorf("%s: %v\nwant exit %d and stderr holding %q", c.desc, res, exitUsage, c.want)
		}
		if n, err := fresh.Client(t).DBSize(t.Context()).Result(); err != nil || n != 0 {
			t.Errorf("%s: DBSIZE = %d, %v; want 0", c.desc, n, err)
		}
	}
	// A cap in counter mode is taken: the dispatcher counts the tenant's
	// tasks in flight itself, whatever the mode.
	if got, want := mustRun(t, "--redis", fresh.URL(), "quota", "set", "acme", "--limit", "5", "--window", "1s", "--max-in-flight", "2", "--mode", "counter").stdout,
		"acme: 5/1s, counter, max in flight 2, max parked 10000\n"; got != want {
		t.Errorf("cap in counter mode: quota set printed %q, want %q", got, want)
	}
	if got, err := admission.NewRedisQuotas(fresh.Client(t)).Get(t.Context(), "acme"); err != nil || got != (admission.Quota{Limit: 5, Window: time.Second, Mode: admission.Counter, MaxInFlight: 2}) {
		t.Errorf("cap in counter mode: stored %v, %v", got, err)
	}
}

// TestStatusShowsDepth: status shows a capped tenant's permits in use
// against its cap, its parked tasks and how long the oldest has waited,
// as text and JSON; enqueue says when a task is parked.
func TestStatusShowsDepth(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	mustRun(t, append(base, "quota", "set", "noisy", "--limit", "100", "--window", "1s", "--max-in-flight", "1", "--max-parked", "10")...)
	mustRun(t, append(base, "quota", "set", "calm", "--limit", "5", "--window", "1s")...)
	hold := serveQueue(t, srv)
	mustRun(t, append(base, "enqueue", "--tenant", "noisy", "--type", "x")...)
	for range 2 {
		if out := mustRun(t, append(base, "enqueue", "--tenant", "noisy", "--type", "x")...).stdout; !strings.HasPrefix(out, "parked: task ") {
			t.Errorf("enqueue over the cap printed %q, want parked", out)
		}
	}
	var got statusReport
	out := mustRun(t, append(base, "status", "--json")...).stdout
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(got.Dispatch) != 1 || got.Dispatch[0].Queue != "default" || len(got.Dispatch[0].Tenants) != 1 {
		t.Fatalf("status --json: dispatch = %+v, want queue default with noisy", got.Dispatch)
	}
	noisy := got.Dispatch[0].Tenants[0]
	if noisy.Tenant != "noisy" || noisy.InFlight != 1 || noisy.Parked != 2 || !noisy.AtCap || noisy.OldestParkedAge == nil {
		t.Errorf("noisy = %+v; want 1 in flight (at cap), 2 parked, an oldest age", noisy)
	}
	text := mustRun(t, append(base, "status")...).stdout
	if !strings.Contains(text, "TENANT  PARKED  OLDEST PARKED  IN FLIGHT") || !strings.Contains(text, "1/1 (at cap)") {
		t.Errorf("status lacks the dispatch table:\n%s", text)
	}
	// Paused, its parked tasks say so, as text and JSON, once the pause
	// reaches the queue (the worker's loop hands it in).
	mustRun(t, append(base, "quota", "pause", "noisy")...)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		text = mustRun(t, append(base, "status")...).stdout
		if strings.Contains(text, "2 (paused)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of a paused tenant lacks \"2 (paused)\" after 5 s:\n%s", text)
		}
	}
	got = statusReport{}
	if err := json.Unmarshal([]byte(mustRun(t, append(base, "status", "--json")...).stdout), &got); err != nil || len(got.Dispatch) != 1 ||
		len(got.Dispatch[0].Tenants) != 1 || !got.Dispatch[0].Tenants[0].Paused {
		t.Errorf("status --json of a paused tenant: %+v (%v), want paused", got.Dispatch, err)
	}
	// Once no worker with a gate serves the queue, status warns.
	hold.Close()
	text = mustRun(t, append(base, "status")...).stdout
	if !strings.Contains(text, "no worker with a Gate serves it") {
		t.Errorf("status does not warn of parked tasks no worker will move:\n%s", text)
	}
}

// TestDemoFairScenario runs the fair demo: its checks pass.
func TestDemoFairScenario(t *testing.T) {
	t.Parallel()
	// On a redis-server: under the race detector an embedded Redis is the
	// bottleneck of the fair pool, not the dispatcher.
	srv := redistest.Start(t)
	res := admitq(t, "--redis", srv.URL(), "demo", "--scenario", "fair")
	if res.code != exitOK {
		t.Fatalf("demo --scenario fair: %v", res)
	}
	for _, want := range []string{"ok   work-conserving", "ok   weighted", "ok   nothing lost"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, res.stdout)
		}
	}
}

// TestDemoDepthScenario runs the depth demo on a redis-server and on the
// embedded Redis: both checks pass, and the run cleans up after itself.
func TestDemoDepthScenario(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, args := range [][]string{
		{"--redis", srv.URL(), "demo", "--scenario", "depth", "--duration", "2s"},
		{"demo", "--scenario", "depth", "--duration", "2s"},
	} {
		res := admitq(t, args...)
		if res.code != exitOK {
			t.Fatalf("%v: %v", args, res)
		}
		for _, want := range []string{"ok   depth bound", "ok   nothing lost", "noisy: in flight "} {
			if !strings.Contains(res.stdout, want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, res.stdout)
			}
		}
	}
	if keys, err := srv.Client(t).Keys(t.Context(), "admitq-demo-*").Result(); err != nil || len(keys) != 0 {
		t.Errorf("keys left behind: %v, %v", keys, err)
	}
	if res := admitq(t, "demo", "--scenario", "burst"); res.code != exitUsage || !strings.Contains(res.stderr, `--scenario "burst"`) {
		t.Errorf("a bad --scenario: %v", res)
	}
}

// serveQueue makes srv's queue "default" dispatched, as a worker with a
// gate would, but runs no task, until the test ends or the server it
// returns is closed: producers then park capped tenants' tasks. It waits
// until producers can see it.
func serveQueue(t *testing.T, srv *redistest.Server) *dispatch.Server {
	t.Helper()
	rdb := srv.Client(t)
	g := admission.New(rdb, admission.NewRedisQuotas(rdb))
	t.Cleanup(func() { g.Close() })
	hold, err := dispatch.New(rdb, g, nil).Serve(dispatch.Worker{Queues: []string{"default"}, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hold.Close)
	return hold
}

// TestStatusWarnsOfAnEvictingRedis: a maxmemory-policy other than
// noeviction is named in status, text and JSON.
func TestStatusWarnsOfAnEvictingRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	if out := mustRun(t, append(base, "status")...).stdout; strings.Contains(out, "maxmemory-policy") {
		t.Errorf("status warns of noeviction:\n%s", out)
	}
	if err := srv.Client(t).ConfigSet(t.Context(), "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if out := mustRun(t, append(base, "status")...).stdout; !strings.Contains(out, "has maxmemory-policy allkeys-lru") {
		t.Errorf("status does not warn of allkeys-lru:\n%s", out)
	}
	var got statusReport
	if err := json.Unmarshal([]byte(mustRun(t, append(base, "status", "--json")...).stdout), &got); err != nil || len(got.Eviction) != 1 {
		t.Errorf("status --json eviction = %v, %v; want the server's allkeys-lru", got.Eviction, err)
	}
}

// TestStatusSaysHowManyMoreTenantsWait: past the dispatch.StatsTenants
// tenants it lists, status says how many more have tasks parked, as text
// and JSON.
func TestStatusSaysHowManyMoreTenantsWait(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	g := admission.New(rdb, admission.StaticQuotas{Default: &admission.Quota{Limit: admission.NoLimit}})
	t.Cleanup(func() { g.Close() })
	hold, err := dispatch.New(rdb, g, nil).Serve(dispatch.Worker{Queues: []string{"default"}, Concurrency: 1, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hold.Close)
	client := enqueue.NewFromRedis(rdb, g)
	const tenants = dispatch.StatsTenants + 30
	parked := 0
	for i := range tenants {
		_, d, err := client.Enqueue(t.Context(), "t"+strconv.Itoa(i), asynq.NewTask("x", nil))
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome == admission.Parked {
			parked++
		}
	}
	if parked <= dispatch.StatsTenants {
		t.Fatalf("%d tenants parked, want more than %d", parked, dispatch.StatsTenants)
	}
	var got statusReport
	if err := json.Unmarshal([]byte(mustRun(t, "--redis", srv.URL(), "status", "--json").stdout), &got); err != nil || len(got.Dispatch) != 1 {
		t.Fatalf("status --json: %+v, %v", got.Dispatch, err)
	}
	q := got.Dispatch[0]
	if q.TenantsWaiting != parked || q.MoreWaiting != parked-dispatch.StatsTenants {
		t.Errorf("tenants_waiting %d, more_waiting %d; want %d and %d", q.TenantsWaiting, q.MoreWaiting, parked, parked-dispatch.StatsTenants)
	}
	want := fmt.Sprintf("… and %d more tenants with tasks parked (status lists the first %d of a queue", parked-dispatch.StatsTenants, dispatch.StatsTenants)
	if text := mustRun(t, "--redis", srv.URL(), "status").stdout; !strings.Contains(text, want) {
		t.Errorf("status lacks %q:\n%s", want, text)
	}
}
