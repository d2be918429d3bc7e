package admission_test

import (
	"context"
	"errors"

	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

func refs(prefix string, n int) []admission.Ref {
	rs := make([]admission.Ref, n)
	for i := range rs {
		rs[i] = admission.Ref{ID: prefix + strconv.Itoa(i), Queue: "default"}
	}
	return rs
}

func outcomes(ds []admission.Decision) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Outcome.String()
		if d.Full {
			out[i] += "/full"
		}
	}
	return out
}

// TestAdmitTasksCapsAndParksInOrder checks a capped tenant's decisions:
// the first MaxInFlight tasks take permits, the rest park, in order, up to
// MaxParked, and the next is rejected as full; asking again for a task
// already decided takes nothing more.
func TestAdmitTasksCapsAndParksInOrder(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	q := admission.Quota{Limit: 100, Window: time.Minute, MaxInFlight: 2, MaxParked: 3}
	g := admission.New(rdb, admission.StaticQuotas{Default: &q})
	ctx := context.Background()
	ds, err := g.AdmitTasks(ctx, "t", refs("a", 6))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"admitted", "admitted", "parked", "parked", "parked", "rejected/full"}
	if diff := cmp.Diff(want, outcomes(ds)); diff != "" {
		t.Fatalf("outcomes (-want,+got):\n%s", diff)
	}
	again, err := g.AdmitTasks(ctx, "t", refs("a", 3))
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range again {
		if !d.Existing || d.Outcome != ds[i].Outcome {
			t.Errorf("task %d asked again: %v existing %v; want %v existing", i, d.Outcome, d.Existing, ds[i].Outcome)
		}
	}
	u, err := g.Usage(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if u.InFlight != 2 || u.Parked != 3 || u.OldestParked.IsZero() || u.InWindow != 2 {
		t.Fatalf("Usage: in flight %d, parked %d, oldest %v, in window %d; want 2, 3, set, 2", u.InFlight, u.Parked, u.OldestParked, u.InWindow)
	}

	// Giving one back hands its permit to the oldest parked task.
	dep, err := g.Permits().Finish(ctx, "t", refs("a", 1)[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(dep.Grants) != 1 || dep.Grants[0].Ref.ID != "a2" || dep.InFlight != 2 || dep.Parked != 2 {
		t.Fatalf("Finish: %+v; want a2 granted, 2 in flight, 2 parked", dep)
	}
	// A new task parks behind the backlog even though the tenant has room
	// for none: FIFO.
	ds, err = g.AdmitTasks(ctx, "t", refs("b", 1))
	if err != nil || ds[0].Outcome != admission.Parked {
		t.Fatalf("new task: %v, %v; want parked", ds, err)
	}
}

// TestAdmitTasksRateRejectionIsNotParked: a capped tenant with permits
// free is still held to its rate; a request past MaxDelay is rejected,
// not parked, and holds nothing.
func TestAdmitTasksRateRejectionIsNotParked(t *testing.T) {
	t.Parallel()
	rdb := redistest.Start(t).Client(t)
	q := admission.Quota{Limit: 1, Window: time.Minute, MaxInFlight: 5}
	g := admission.New(rdb, admission.StaticQuotas{Default: &q})
	ds, err := g.AdmitTasks(context.Background(), "t", refs("a", 3))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"admitted", "rejected", "rejected"}, outcomes(ds)); diff != "" {
		t.Fatalf("outcomes (-want,+got):\n%s", diff)
	}
	if u, _ := g.Usage(context.Background(), "t"); u.InFlight != 1 || u.Parked != 0 {
		t.Fatalf("in flight %d, parked %d; want 1, 0", u.InFlight, u.Parked)
	}
	// A retry of the admitted task, with the window full and permits free,
	// gets its slot back and takes no second permit.
	again, err := g.AdmitTasks(context.Background(), "t", refs("a", 1))
	if err != nil || again[0].Outcome != admission.Admitted || !again[0].Existing || !again[0].At.Equal(ds[0].At) {
		t.Fatalf("retry: %+v, %v; want admitted, existing, at %v", again, err, ds[0].At)
	}
	if u, _ := g.Usage(context.Background(), "t"); u.InFlight != 1 {
		t.Fatalf("in flight %d after the retry, want 1", u.InFlight)
	}
}

// commandCounts reads how many times Redis ran each command, scripts'
// own calls included.
func commandCounts(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64)
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
		out[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return out
}

// TestNoCapCostsNothingExtra: for a tenant without MaxInFlight, AdmitTasks
// makes Redis run exactly the commands AdmitBatch does, call for call:
// the uncapped path is admit.lua's, untouched.
func TestNoCapCostsNothingExtra(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	q := admission.Quota{Limit: 50, Window: time.Minute, MaxDelay: time.Minute}
	ctx := context.Background()
	run := func(f func(g *admission.Gate, i int) error) map[string]int64 {
		g := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithDenyCache(false))
		if _, err := g.Admit(ctx, "warm"); err != nil { // loads the script
			t.Fatal(err)
		}
		before := commandCounts(t, rdb)
		for i := range 120 {
			if err := f(g, i); err != nil {
				t.Fatal(err)
			}
		}
		after := commandCounts(t, rdb)
		delta := make(map[string]int64)
		for k, v := range after {
			if d := v - before[k]; d != 0 && k != "info" {
				delta[k] = d
			}
		}
		return delta
	}
	batch := run(func(g *admission.Gate, i int) error {
		_, err := g.AdmitBatch(ctx, "batch", []string{"id" + strconv.Itoa(i)})
		return err
	})
	tasks := run(func(g *admission.Gate, i int) error {
		_, err := g.AdmitTasks(ctx, "tasks", []admission.Ref{{ID: "id" + strconv.Itoa(i), Queue: "default"}})
		return err
	})
	for _, m := range []map[string]int64{batch, tasks} {
		// Connection setup, and whether a script was loaded by the first
		// call of all or is run by SHA, are not the path's doing.
		m["scripts"] = m["eval"] + m["evalsha"]
		for _, k := range []string{"eval", "evalsha", "script|load", "hello", "client|setinfo", "select"} {
			delete(m, k)
		}
	}
	if diff := cmp.Diff(batch, tasks); diff != "" {
		t.Fatalf("Redis commands for 120 uncapped decisions (-AdmitBatch,+AdmitTasks):\n%s", diff)
	}
	if tasks["zadd"] == 0 {
		t.Fatalf("no ZADD counted: %v", tasks)
	}
}

func TestQuotaDepthFieldsRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		desc string
		q    admission.Quota
		json string
	}{
		{"no cap writes no cap fields", admission.Quota{Limit: 5, Window: time.Second}, `{"limit":5,"window":"1s"}`},
		{"cap and parked bound", admission.Quota{Limit: 5, Window: time.Second, MaxInFlight: 3, MaxParked: 100}, `{"limit":5,"window":"1s","max_in_flight":3,"max_parked":100}`},
	} {
		b, err := tc.q.MarshalText()
		if err != nil || string(b) != tc.json {
			t.Errorf("%s: MarshalText = %s, %v; want %s", tc.desc, b, err, tc.json)
		}
		var got admission.Quota
		if err := got.UnmarshalText(b); err != nil || got != tc.q {
			t.Errorf("%s: UnmarshalText = %+v, %v; want %+v", tc.desc, got, err, tc.q)
		}
	}
}

func TestQuotaDepthValidation(t *testing.T) {
	for _, tc := range []struct {
		desc string
		q    admission.Quota
		want string
	}{
		{"negative cap", admission.Quota{Limit: 1, Window: time.Second, MaxInFlight: -1}, "MaxInFlight is -1"},
		{"negative parked bound", admission.Quota{Limit: 1, Window: time.Second, MaxInFlight: 1, MaxParked: -2}, "MaxParked is -2"},
		{"parked bound without a cap", admission.Quota{Limit: 1, Window: time.Second, MaxParked: 5}, "without MaxInFlight"},
		{"cap in counter mode", admission.Quota{Limit: 1, Window: time.Second, Mode: admission.Counter, MaxInFlight: 2}, "counter mode"},
	} {
		err := tc.q.Validate()
		if !errors.Is(err, admission.ErrInvalidQuota) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidQuota naming %q", tc.desc, err, tc.want)
		}
	}
}
