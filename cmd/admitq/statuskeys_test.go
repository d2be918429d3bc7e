package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/admitq/admitq/internal/redistest"
)

// status shows a dispatched queue's keys: one at its cap with a task
// waiting on it, one paused; a task without those keys is not held back
// by them.
func TestStatusShowsKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	base := []string{"--redis", srv.URL()}
	run := func(args ...string) result { return mustRun(t, append(slices.Clone(base), args...)...) }
	run("quota", "set", "acme", "--limit", "none")
	run("quota", "set", "globex", "--limit", "none")
	run("key", "set", "api:stripe", "--max-in-flight", "1")
	run("key", "pause", "db:reports")
	hold := serveQueue(t, srv) // a worker with a gate that runs nothing: what goes in stays in flight
	enq := func(tenant string, keys ...string) string {
		args := []string{"enqueue", "--tenant", tenant, "--type", "x"}
		for _, k := range keys {
			args = append(args, "--key", k)
		}
		return run(args...).stdout
	}
	if out := run("enqueue", "--tenant", "acme", "--type", "x", "--key", "api:stripe", "--id", "first").stdout; !strings.HasPrefix(out, "admitted: ") {
		t.Errorf("the first api:stripe task: %q, want admitted", out)
	}
	if out := enq("globex", "api:stripe"); !strings.HasPrefix(out, "parked: ") {
		t.Errorf("a second api:stripe task over the key's cap of 1: %q, want parked", out)
	}
	if out := enq("acme", "db:reports"); !strings.HasPrefix(out, "parked: ") {
		t.Errorf("a db:reports task while the key is paused: %q, want parked", out)
	}
	if out := enq("globex"); !strings.HasPrefix(out, "admitted: ") {
		t.Errorf("a task without keys: %q, want admitted, held back by no key", out)
	}

	r := statusOf(t, base)
	if len(r.Dispatch) != 1 {
		t.Fatalf("dispatch = %+v, want the default queue", r.Dispatch)
	}
	want := []dispatchKey{
		{Key: "api:stripe", Parked: 1, InFlight: 1, MaxInFlight: 1, AtCap: true},
		{Key: "db:reports", Parked: 1, Paused: true},
	}
	if diff := cmp.Diff(want, r.Dispatch[0].Keys); diff != "" {
		t.Errorf("status --json dispatch keys (-want,+got):\n%s", diff)
	}
	text := run("status").stdout
	_, keys, ok := strings.Cut(text, "KEY         PARKED  IN FLIGHT     HELD\n")
	if !ok {
		t.Fatalf("status lacks the keys' table:\n%s", text)
	}
	for _, line := range []string{
		"api:stripe  1       1/1 (at cap)  -\n",
		"db:reports  1       0             paused\n",
	} {
		if !strings.Contains(keys, line) {
			t.Errorf("the keys' table lacks %q:\n%s", line, text)
		}
	}
	// Resumed: the waiting task goes in, and the key's row says so.
	run("key", "resume", "db:reports")
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := statusOf(t, base)
		i := slices.IndexFunc(r.Dispatch[0].Keys, func(k dispatchKey) bool { return k.Key == "db:reports" })
		if i >= 0 && !r.Dispatch[0].Keys[i].Paused && r.Dispatch[0].Keys[i].Parked == 0 && r.Dispatch[0].Keys[i].InFlight == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("db:reports 10 s after resume: %+v", r.Dispatch[0].Keys)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A downstream throttle on the key (worker.ThrottledKey) holds it; the
	// row says for how long, and until when.
	hold.ThrottledKey("default", "acme", "first", "api:stripe", 0, time.Minute)
	var k dispatchKey
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := statusOf(t, base)
		if i := slices.IndexFunc(r.Dispatch[0].Keys, func(k dispatchKey) bool { return k.Key == "api:stripe" }); i >= 0 && r.Dispatch[0].Keys[i].Held {
			k = r.Dispatch[0].Keys[i]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("api:stripe 10 s after its throttle: %+v", r.Dispatch[0].Keys)
		}
	}
	if k.HeldUntil == nil || k.HeldFor == nil || *k.HeldFor <= 50 || *k.HeldFor > 60 {
		t.Errorf("api:stripe held: %+v, want until a minute from now", k)
	}
	text = run("status").stdout
	if _, keys, _ := strings.Cut(text, "HELD\n"); !strings.Contains(keys, "  held ") || !strings.Contains(keys, " (until ") {
		t.Errorf("status does not say api:stripe is held, and until when:\n%s", text)
	}
}
