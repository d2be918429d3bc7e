package admission_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/rediserr"
	"github.com/admitq/admitq/internal/redistest"
)

// TestOutOfMemoryIsAnAnswer runs gates on a real redis-server over its
// maxmemory (noeviction). Every admission fails with Redis's OOM reply and
// records nothing; it is not ErrUnavailable, so FailOpen does not admit
// locally (writes could not land, and Redis is answering) and the breaker
// does not open: once memory is back, the next call is decided by Redis.
func TestOutOfMemoryIsAnAnswer(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	q := admission.Quota{Limit: 3, Window: 200 * time.Millisecond, MaxDelay: time.Second}
	for _, tc := range []struct {
		desc string
		opts []admission.Option
	}{
		{"fail closed", nil},
		{"fail open", []admission.Option{admission.WithFailurePolicy(admission.FailOpen)}},
		{"fail open, unbatched, no deny cache", []admission.Option{admission.WithFailurePolicy(admission.FailOpen), admission.WithBatching(false), admission.WithDenyCache(false)}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			prefix := "oom-" + strings.ReplaceAll(tc.desc, " ", "-")
			g := admission.New(rdb, admission.StaticQuotas{Default: &q}, append([]admission.Option{admission.WithPrefix(prefix)}, tc.opts...)...)
			defer g.Close()
			// One entry that leaves the window and one that stays: the
			// next admission would trim before it records.
			for range 2 {
				if _, err := g.Admit(ctx, "t"); err != nil {
					t.Fatal(err)
				}
				time.Sleep(120 * time.Millisecond)
			}
			key := prefix + ":{t}:log"
			before := rdb.ZRange(ctx, key, 0, -1).Val()
			rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction")
			t.Cleanup(func() { rdb.ConfigSet(ctx, "maxmemory", "0") })
			if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
				t.Fatal(err)
			}
			for i := range 50 {
				d, err := g.Admit(ctx, "t")
				switch {
				case err == nil:
					t.Fatalf("call %d under OOM: decided %v (local %v), want an OOM error", i, d.Outcome, d.Local)
				case errors.Is(err, admission.ErrUnavailable):
					t.Fatalf("call %d under OOM: %v; OOM is an answer, not an outage", i, err)
				case !rediserr.IsOOM(err):
					t.Fatalf("call %d under OOM: %v, want Redis's OOM reply under errors.As", i, err)
				}
			}
			after := rdb.ZRange(ctx, key, 0, -1).Val()
			if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
				t.Fatal(err)
			}
			// Nothing recorded. (Redis may expire the log meanwhile: an
			// expiry is not a script's write.)
			for _, id := range after {
				if !slices.Contains(before, id) {
					t.Errorf("the log under OOM went from %v to %v; a refused script records nothing", before, after)
					break
				}
			}
			d, err := g.Admit(ctx, "t")
			if err != nil || d.Local {
				t.Fatalf("first call with memory back: %v, local %v; want a decision from Redis (the breaker stays closed)", err, d.Local)
			}
		})
	}
}
