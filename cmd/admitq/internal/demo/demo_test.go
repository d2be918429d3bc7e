package demo

import (
	"bytes"
	"image/png"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
)

func TestRunFlattensTheNoisyTenantAndLosesNothing(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	var seconds []Second
	id := NewRunID()
	res, err := Run(t.Context(), Config{
		Redis:    rdb,
		Worker:   asynq.RedisClientOpt{Addr: mr.Addr()},
		Prefix:   "test-" + id,
		Queue:    "test-" + id,
		Duration: 4 * time.Second,
		OnSecond: func(s Second) { seconds = append(seconds, s) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Bound || !res.NothingLost || res.Interrupted {
		t.Fatalf("result: bound %v, nothing lost %v, interrupted %v; want true, true, false\n%+v", res.Bound, res.NothingLost, res.Interrupted, res)
	}
	byName := map[string]TenantResult{}
	for _, tr := range res.Tenants {
		byName[tr.Name] = tr
		if got := tr.Admitted + tr.Deferred + tr.Rejected + tr.Errors; got != tr.Sent {
			t.Errorf("%s: %d decisions for %d sent", tr.Name, got, tr.Sent)
		}
		if tr.Processed+tr.Waiting != tr.Admitted+tr.Deferred || tr.Lost != 0 {
			t.Errorf("%s: %d processed + %d waiting, %d lost, for %d enqueued", tr.Name, tr.Processed, tr.Waiting, tr.Lost, tr.Admitted+tr.Deferred)
		}
		if tr.MaxInWindow > tr.Quota.Limit {
			t.Errorf("%s: %d slots in one window, limit %d", tr.Name, tr.MaxInWindow, tr.Quota.Limit)
		}
	}
	noisy := byName["noisy"]
	if noisy.MaxInWindow != 10 || noisy.Rejected == 0 || noisy.Deferred == 0 {
		t.Errorf("noisy: %d in its busiest window, %d deferred, %d rejected; want 10, some, some", noisy.MaxInWindow, noisy.Deferred, noisy.Rejected)
	}
	// Starts per second follow asynq's promotion ticks, so they are not
	// exact like the slots; the typical second is the quota.
	sending := slices.Clone(noisy.Started[:int(res.Sending/time.Second)])
	slices.Sort(sending)
	if median := sending[len(sending)/2]; median != 10 {
		t.Errorf("noisy: median %d tasks started per second, want its quota of 10; per second %v", median, noisy.Started)
	}
	for _, name := range []string{"steady", "small"} {
		if tr := byName[name]; tr.Deferred+tr.Rejected+tr.Errors != 0 {
			t.Errorf("%s, within its quota: %d deferred, %d rejected, %d errors; want none", name, tr.Deferred, tr.Rejected, tr.Errors)
		}
	}
	if len(seconds) < 4 || seconds[0].N != 1 || seconds[0].Draining || !seconds[len(seconds)-1].Draining {
		t.Errorf("OnSecond got %d seconds, want at least 4, numbered from 1, the last draining", len(seconds))
	}
	var admittedInSeconds int
	for _, s := range seconds {
		admittedInSeconds += s.Tenants[0].Admitted + s.Tenants[0].Deferred
	}
	if admittedInSeconds != noisy.Admitted+noisy.Deferred {
		t.Errorf("per-second lines add up to %d admitted or deferred for noisy, totals say %d", admittedInSeconds, noisy.Admitted+noisy.Deferred)
	}

	// Both chart formats render.
	c := ChartOf(res)
	var svg, img bytes.Buffer
	if err := c.WriteSVG(&svg); err != nil || !strings.Contains(svg.String(), ">noisy started (quota 10/s, dashed)</text>") {
		t.Errorf("WriteSVG: %v, %d bytes", err, svg.Len())
	}
	if err := c.WritePNG(&img); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&img); err != nil {
		t.Errorf("WritePNG wrote no PNG: %v", err)
	}

	// The run cleans up after itself: quotas and the queue are gone.
	if n := rdb.HLen(t.Context(), "test-"+id+":quotas").Val(); n != 0 {
		t.Errorf("%d quotas left behind", n)
	}
	if keys := rdb.Keys(t.Context(), "asynq:{test-"+id+"}:*").Val(); len(keys) != 0 {
		t.Errorf("asynq keys left behind: %v", keys)
	}
}

func TestMaxInWindowIsExact(t *testing.T) {
	at := func(ms ...int) []time.Time {
		var ts []time.Time
		for _, m := range ms {
			ts = append(ts, time.UnixMilli(int64(m)))
		}
		return ts
	}
	for _, c := range []struct {
		desc  string
		slots []time.Time
		want  int
	}{
		{"none", nil, 0},
		{"one", at(5), 1},
		{"exactly one window apart are in different windows", at(0, 1000), 1},
		{"just under one window apart share one", at(0, 999), 2},
		{"busiest window in the middle", at(0, 100, 1050, 1100, 1200, 2300), 3},
		{"unsorted input", at(1200, 0, 1100, 1050), 3},
	} {
		if got := maxInWindow(c.slots, time.Second); got != c.want {
			t.Errorf("%s: maxInWindow = %d, want %d", c.desc, got, c.want)
		}
	}
}

func TestRunRejectsABadScenario(t *testing.T) {
	for _, c := range []struct {
		desc    string
		tenants []Tenant
	}{
		{"bad tenant", []Tenant{{Name: "", Quota: admission.Quota{Limit: 1, Window: time.Second}, Rate: 1}}},
		{"bad quota", []Tenant{{Name: "a", Quota: admission.Quota{Limit: 0, Window: time.Second}, Rate: 1}}},
		{"bad rate", []Tenant{{Name: "a", Quota: admission.Quota{Limit: 1, Window: time.Second}, Rate: 0}}},
	} {
		if _, err := Run(t.Context(), Config{Tenants: c.tenants}); err == nil {
			t.Errorf("%s: Run returned no error", c.desc)
		}
	}
}
