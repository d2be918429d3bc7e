package admission_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestQuotaUpperBounds checks that every field's upper bound is enforced
// with an ErrInvalidQuota that names the field, that the largest values
// are valid, and that no value overflows on the way.
func TestQuotaUpperBounds(t *testing.T) {
	ok := admission.Quota{Limit: 10, Window: time.Second}
	with := func(f func(*admission.Quota)) admission.Quota {
		q := ok
		f(&q)
		return q
	}
	for _, tc := range []struct {
		desc string
		q    admission.Quota
		want string // "" for valid; else text the error must hold
	}{
		{"Limit = MaxInt64 is refused", with(func(q *admission.Quota) { q.Limit = math.MaxInt64 }), "Limit"},
		{"Limit past MaxLimit is refused", with(func(q *admission.Quota) { q.Limit = admission.MaxLimit + 1; q.Mode = admission.Counter }), "Limit"},
		{"Limit = MaxLimit in counter mode is valid", with(func(q *admission.Quota) { q.Limit = admission.MaxLimit; q.Mode = admission.Counter }), ""},
		{"Window past MaxWindow is refused", with(func(q *admission.Quota) { q.Window = admission.MaxWindow + 1 }), "Window"},
		{"Window = MaxInt64 is refused", with(func(q *admission.Quota) { q.Window = math.MaxInt64 }), "Window"},
		{"Window = MaxWindow is valid", with(func(q *admission.Quota) { q.Window = admission.MaxWindow }), ""},
		{"MaxDelay past MaxMaxDelay is refused", with(func(q *admission.Quota) { q.MaxDelay = admission.MaxMaxDelay + 1 }), "MaxDelay"},
		{"MaxDelay = MaxInt64 is refused", with(func(q *admission.Quota) { q.MaxDelay = math.MaxInt64 }), "MaxDelay"},
		{"MaxDelay = MaxMaxDelay is valid", with(func(q *admission.Quota) { q.MaxDelay = admission.MaxMaxDelay; q.Window = admission.MaxWindow }), ""},
		{"MaxInFlight past its cap is refused", with(func(q *admission.Quota) { q.MaxInFlight = admission.MaxInFlightCap + 1 }), "MaxInFlight"},
		{"MaxInFlight = MaxInt64 is refused", with(func(q *admission.Quota) { q.MaxInFlight = math.MaxInt64 }), "MaxInFlight"},
		{"MaxInFlight at its cap is valid", with(func(q *admission.Quota) { q.MaxInFlight = admission.MaxInFlightCap }), ""},
		{"MaxParked past its cap is refused", with(func(q *admission.Quota) { q.MaxInFlight = 1; q.MaxParked = admission.MaxParkedCap + 1 }), "MaxParked"},
		{"MaxParked at its cap is valid", with(func(q *admission.Quota) { q.MaxInFlight = 1; q.MaxParked = admission.MaxParkedCap }), ""},
		{"a log of MaxLogEntries is valid", with(func(q *admission.Quota) { q.Limit = admission.MaxLogEntries }), ""},
		{"a log one past MaxLogEntries is refused", with(func(q *admission.Quota) { q.Limit = admission.MaxLogEntries + 1 }), "MaxLogEntries"},
		{"MaxDelay counts: 10 windows of MaxLogEntries/10 is valid", admission.Quota{Limit: admission.MaxLogEntries / 10, Window: time.Second, MaxDelay: 9 * time.Second}, ""},
		{"MaxDelay counts: a part window more is refused", admission.Quota{Limit: admission.MaxLogEntries / 10, Window: time.Second, MaxDelay: 9*time.Second + 1}, "MaxLogEntries"},
		{"the most windows (MaxMaxDelay over 1ms) do not overflow", admission.Quota{Limit: 1, Window: time.Millisecond, MaxDelay: admission.MaxMaxDelay}, "MaxLogEntries"},
		{"the same quota in counter mode is valid", admission.Quota{Limit: admission.MaxLimit, Window: time.Millisecond, MaxDelay: admission.MaxMaxDelay, Mode: admission.Counter}, ""},
	} {
		err := tc.q.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: Validate(%+v) = %v, want nil", tc.desc, tc.q, err)
		case tc.want != "" && (!errors.Is(err, admission.ErrInvalidQuota) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: Validate(%+v) = %v, want ErrInvalidQuota naming %s", tc.desc, tc.q, err, tc.want)
		}
		// A quota stored by hand past a bound is refused on the way in.
		if tc.want != "" {
			raw := fmt.Sprintf(`{"limit":%d,"window":%q,"max_delay":%q}`, tc.q.Limit, tc.q.Window, tc.q.MaxDelay)
			var q admission.Quota
			if err := q.UnmarshalText([]byte(raw)); err == nil && tc.q.Mode == admission.Log && tc.q.MaxInFlight == 0 && tc.q.MaxParked == 0 {
				t.Errorf("%s: UnmarshalText(%s) accepted it", tc.desc, raw)
			}
		}
	}
	err := admission.Quota{Limit: admission.MaxLogEntries + 1, Window: time.Minute}.Validate()
	if msg := fmt.Sprint(err); !strings.Contains(msg, "Counter mode") {
		t.Errorf("the log-size error does not point to Counter mode: %s", msg)
	}
}

// TestLargestLogStaysWithinTheTimeout fills one tenant's log to
// MaxLogEntries on a real redis-server, lets every entry leave the window
// and makes the call that trims them all: the largest single Redis call
// the biggest allowed log quota makes. It must end well within the gate's
// default timeout (250 ms); the test logs its time, from SLOWLOG.
func TestLargestLogStaysWithinTheTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a log of MaxLogEntries")
	}
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const window = 3 * time.Second
	q := admission.Quota{Limit: admission.MaxLogEntries, Window: window}
	g := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithTimeout(5*time.Second), admission.WithDenyCache(false))
	defer g.Close()

	ids := make([]string, 1000)
	start := time.Now()
	for b := range admission.MaxLogEntries / len(ids) {
		for i := range ids {
			ids[i] = strconv.Itoa(b*len(ids) + i)
		}
		ds, err := g.AdmitBatch(ctx, "big", ids)
		if err != nil {
			t.Fatal(err)
		}
		if ds[len(ds)-1].Outcome != admission.Admitted {
			t.Fatalf("batch %d: %v, want admitted", b, ds[len(ds)-1].Outcome)
		}
	}
	filled := time.Since(start)
	if filled > window {
		t.Skipf("filling took %v, longer than the window: the machine is too slow for this test", filled)
	}
	key := "admitq:{big}:log"
	if n := rdb.ZCard(ctx, key).Val(); n != admission.MaxLogEntries {
		t.Fatalf("the log holds %d entries, want %d", n, admission.MaxLogEntries)
	}
	mem := rdb.MemoryUsage(ctx, key).Val()
	time.Sleep(window + 50*time.Millisecond) // every entry past the window, before the expiry (window/8 later)
	rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	rdb.SlowLogReset(ctx)
	if _, err := g.Admit(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	rdb.ConfigSet(ctx, "slowlog-log-slower-than", "10000")
	if n := rdb.ZCard(ctx, key).Val(); n != 1 {
		t.Fatalf("after the trim the log holds %d entries, want 1", n)
	}
	var worst time.Duration
	logs, err := rdb.SlowLogGet(ctx, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range logs {
		if len(l.Args) > 0 && strings.HasPrefix(strings.ToLower(l.Args[0]), "eval") {
			worst = max(worst, l.Duration)
		}
	}
	// The same log deleted whole, as its expiry does.
	for b := range admission.MaxLogEntries / len(ids) {
		for i := range ids {
			ids[i] = "x" + strconv.Itoa(b*len(ids)+i)
		}
		if _, err := g.AdmitBatch(ctx, "big", ids); err != nil {
			t.Fatal(err)
		}
	}
	rdb.ConfigSet(ctx, "slowlog-log-slower-than", "0")
	rdb.SlowLogReset(ctx)
	rdb.Del(ctx, key)
	rdb.ConfigSet(ctx, "slowlog-log-slower-than", "10000")
	var del time.Duration
	if logs, err := rdb.SlowLogGet(ctx, -1).Result(); err == nil {
		for _, l := range logs {
			if len(l.Args) > 0 && strings.EqualFold(l.Args[0], "del") {
				del = l.Duration
			}
		}
	}
	t.Logf("a log of %d entries (%d bytes): the admission that trims it whole took %v in Redis; deleting it whole %v", admission.MaxLogEntries, mem, worst, del)
	if worst == 0 || worst > 250*time.Millisecond {
		t.Errorf("the largest call took %v, want within the default timeout (250ms)", worst)
	}
}
