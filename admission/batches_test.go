package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestAdmitBatchesAsksRedisOnce: forty tenants' batches cost one call of
// the admission script on one server, where as many AdmitBatchAt calls
// from as many goroutines start a pipeline each while fewer than two are
// out. Each batch is decided as AdmitBatchAt decides it: its own tenant's
// slots, in its IDs' order, rejected past the limit.
func TestAdmitBatchesAsksRedisOnce(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	g := admission.New(srv.Client(t), static(admission.Quota{Limit: 3, Window: time.Minute}), admission.WithDenyCache(false))
	defer g.Close()
	if _, err := g.Admit(t.Context(), "warm"); err != nil { // the version check and the script's load
		t.Fatal(err)
	}
	var batches []admission.Batch
	for i := range 40 {
		b := admission.Batch{Tenant: "b" + strconv.Itoa(i)}
		for j := range 2 + i%3 {
			b.IDs = append(b.IDs, fmt.Sprintf("%d-%d", i, j))
		}
		batches = append(batches, b)
	}
	before := scriptCalls(t, rdb)
	res := g.AdmitBatches(t.Context(), batches)
	if calls := scriptCalls(t, rdb) - before; calls != 1 {
		t.Errorf("%d script calls for %d batches, want 1", calls, len(batches))
	}
	for i, r := range res {
		b := batches[i]
		if r.Err != nil || len(r.Decisions) != len(b.IDs) {
			t.Fatalf("batch %d: %d decisions, error %v; want %d", i, len(r.Decisions), r.Err, len(b.IDs))
		}
		for j, d := range r.Decisions {
			want, id := admission.Admitted, b.IDs[j]
			if j >= 3 {
				want, id = admission.Rejected, "" // a rejection records nothing
			}
			if d.Tenant != b.Tenant || d.ID != id || d.Outcome != want {
				t.Errorf("batch %d, ID %d: %s %q %v, want %s %q %v", i, j, d.Tenant, d.ID, d.Outcome, b.Tenant, id, want)
			}
		}
	}
	// Asked again, the IDs keep their slots and take none more.
	again := g.AdmitBatches(t.Context(), batches[:1])
	if ds := again[0].Decisions; again[0].Err != nil || len(ds) != 2 || !ds[0].Existing || !ds[1].Existing {
		t.Errorf("asked again: %+v, want both Existing", again[0])
	}
}

// TestAdmitBatchesKeepsEachBatchsError: a bad tenant, a bad ID, an empty
// batch, a tenant without a rate limit and a tenant the deny cache answers
// each get what AdmitBatchAt gives them, beside batches decided on Redis,
// and nothing of the bad ones is written.
func TestAdmitBatchesKeepsEachBatchsError(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	quotas := admission.StaticQuotas{
		Default: &admission.Quota{Limit: 1, Window: time.Minute},
		Tenants: map[string]admission.Quota{"free": {Limit: admission.NoLimit, MaxInFlight: 2}},
	}
	g := admission.New(srv.Client(t), quotas)
	defer g.Close()
	ctx := t.Context()
	for range 2 { // the second is rejected: the deny cache holds full's rejection
		if _, err := g.Admit(ctx, "full"); err != nil {
			t.Fatal(err)
		}
	}
	keys := func() int64 { return rdb.DBSize(ctx).Val() }
	before := keys()
	res := g.AdmitBatches(ctx, []admission.Batch{
		{Tenant: "", IDs: []string{"x"}},
		{Tenant: "ok", IDs: []string{"a", "b"}},
		{Tenant: "id", IDs: []string{""}},
		{Tenant: "none"},
		{Tenant: "free", IDs: []string{"f"}},
		{Tenant: "full", IDs: []string{"c"}},
	})
	if !errors.Is(res[0].Err, admission.ErrInvalidTenant) {
		t.Errorf("empty tenant: %v, want ErrInvalidTenant", res[0].Err)
	}
	if ds := res[1].Decisions; res[1].Err != nil || len(ds) != 2 || ds[0].Outcome != admission.Admitted || ds[1].Outcome != admission.Rejected {
		t.Errorf("ok: %+v, want Admitted then Rejected", res[1])
	}
	if res[2].Err == nil {
		t.Error("an empty ID: no error")
	}
	if res[3].Err != nil || res[3].Decisions != nil {
		t.Errorf("no IDs: %+v, want nothing", res[3])
	}
	if ds := res[4].Decisions; res[4].Err != nil || len(ds) != 1 || ds[0].Outcome != admission.Admitted || !ds[0].Local {
		t.Errorf("no rate limit: %+v, want admitted locally", res[4])
	}
	if ds := res[5].Decisions; res[5].Err != nil || len(ds) != 1 || ds[0].Outcome != admission.Rejected {
		t.Errorf("full: %+v, want Rejected", res[5])
	}
	if got := keys(); got != before+1 { // ok's log
		t.Errorf("%d keys after, %d before: want ok's log alone added", got, before)
	}
}

// TestAdmitBatchesEndsWithItsContext: an ended context decides nothing.
func TestAdmitBatchesEndsWithItsContext(t *testing.T) {
	srv := redistest.Start(t)
	g := admission.New(srv.Client(t), static(admission.Quota{Limit: 5, Window: time.Minute}))
	defer g.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, r := range g.AdmitBatches(ctx, []admission.Batch{{Tenant: "a", IDs: []string{"1"}}, {Tenant: "b", IDs: []string{"2"}}}) {
		if !errors.Is(r.Err, context.Canceled) {
			t.Errorf("%+v, want context.Canceled", r)
		}
	}
	if n := srv.Client(t).DBSize(t.Context()).Val(); n != 0 {
		t.Errorf("%d keys written", n)
	}
}

// testClusterBatches: on a cluster, AdmitBatches over tenants on every
// master costs one script call a master, and each tenant gets its limit.
func testClusterBatches(t *testing.T, c *redistest.Cluster) {
	cc := c.Client(t)
	tenants := tenantsOnEveryMaster(t, cc, 30)
	g := admission.New(c.Client(t), static(admission.Quota{Limit: 2, Window: time.Minute}), admission.WithPrefix("cbatch"))
	defer g.Close()
	var batches []admission.Batch
	for _, tenant := range tenants {
		batches = append(batches, admission.Batch{Tenant: tenant, IDs: []string{"x", "y", "z"}})
	}
	// The version check, and the script's load on every master.
	warm := admission.New(c.Client(t), static(admission.Quota{Limit: 2, Window: time.Minute}), admission.WithPrefix("cbatch-warm"))
	defer warm.Close()
	warm.AdmitBatches(t.Context(), batches)
	g.AdmitBatches(t.Context(), nil)
	if _, err := g.Admit(t.Context(), "warm"); err != nil {
		t.Fatal(err)
	}
	calls := func() int64 {
		var n atomic.Int64
		if err := cc.ForEachMaster(t.Context(), func(_ context.Context, m *redis.Client) error {
			n.Add(scriptCalls(t, m))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n.Load()
	}
	before := calls()
	res := g.AdmitBatches(t.Context(), batches)
	if n := calls() - before; n > 3 {
		t.Errorf("%d script calls for %d tenants on 3 masters, want at most 3", n, len(tenants))
	}
	for i, r := range res {
		if r.Err != nil || len(r.Decisions) != 3 || r.Decisions[1].Outcome != admission.Admitted || r.Decisions[2].Outcome != admission.Rejected {
			t.Errorf("tenant %s: %+v, want two admitted and one rejected", batches[i].Tenant, r)
		}
	}
}

// TestBatchesPastMaxBatchAreRefused: a batch of more than MaxBatch IDs is
// ErrBatchTooLarge, alone or among others, and writes nothing; MaxBatch
// IDs are decided.
func TestBatchesPastMaxBatchAreRefused(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	g := admission.New(srv.Client(t), static(admission.Quota{Limit: 5, Window: time.Minute}))
	defer g.Close()
	ids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = strconv.Itoa(i)
		}
		return out
	}
	if _, err := g.AdmitBatch(t.Context(), "big", ids(admission.MaxBatch+1)); !errors.Is(err, admission.ErrBatchTooLarge) {
		t.Errorf("AdmitBatch of MaxBatch+1 IDs: %v, want ErrBatchTooLarge", err)
	}
	res := g.AdmitBatches(t.Context(), []admission.Batch{{Tenant: "big", IDs: ids(admission.MaxBatch + 1)}})
	if !errors.Is(res[0].Err, admission.ErrBatchTooLarge) {
		t.Errorf("AdmitBatches of MaxBatch+1 IDs: %v, want ErrBatchTooLarge", res[0].Err)
	}
	if _, err := g.AdmitID(t.Context(), "big", strings.Repeat("x", admission.MaxIDLen+1)); !errors.Is(err, admission.ErrInvalidID) {
		t.Errorf("AdmitID past MaxIDLen: %v, want ErrInvalidID", err)
	}
	if n := rdb.DBSize(t.Context()).Val(); n != 0 {
		t.Errorf("%d keys written", n)
	}
	ds, err := g.AdmitBatch(t.Context(), "big", ids(admission.MaxBatch))
	if err != nil || len(ds) != admission.MaxBatch || ds[4].Outcome != admission.Admitted || ds[5].Outcome != admission.Rejected {
		t.Errorf("AdmitBatch of MaxBatch IDs: %d decisions, %v; want 5 admitted, the rest rejected", len(ds), err)
	}
}
