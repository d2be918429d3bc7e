package admission_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestAdmitBatchesNeverWaitsForItsOwnProbe: a tenant near its limit
// (fewer than nearFull slots left, so the deny cache paces it) whose
// grants come in several batches of one AdmitBatches call, as a
// dispatcher's turn that alternates two tenants gives them (runs of
// t, u, t, u, ...). Its first batches go as the room allows; the next one
// would wait for the probe, which is one of the same call's batches and is
// sent only once every batch is prepared: AdmitBatches goes to Redis
// instead. (It waited the gate's timeout, and failed as unavailable.)
func TestAdmitBatchesNeverWaitsForItsOwnProbe(t *testing.T) {
	srv := redistest.Start(t)
	g := admission.New(srv.Client(t), static(admission.Quota{Limit: 100, Window: time.Minute}))
	defer g.Close()
	ctx := t.Context()
	warm := make([]string, 95)
	for i := range warm {
		warm[i] = fmt.Sprintf("w%d", i)
	}
	ds, err := g.AdmitBatch(ctx, "t", warm) // 5 left: paced, room 5
	if err != nil || ds[len(ds)-1].Remaining != 5 {
		t.Fatalf("warm-up: remaining %d, %v", ds[len(ds)-1].Remaining, err)
	}
	var batches []admission.Batch
	for i := range 8 {
		batches = append(batches,
			admission.Batch{Tenant: "t", IDs: []string{fmt.Sprintf("t%d", i)}},
			admission.Batch{Tenant: "u", IDs: []string{fmt.Sprintf("u%d", i)}})
	}
	start := time.Now()
	res := g.AdmitBatches(ctx, batches)
	took := time.Since(start)
	for i, r := range res {
		if r.Err != nil {
			t.Errorf("batch %d (tenant %s): %v", i, batches[i].Tenant, r.Err)
		}
	}
	if took > admission.DefaultTimeout/2 {
		t.Errorf("AdmitBatches took %v: it waited for its own probe", took)
	}
}

// TestAdmitBatchesOfMaxBatchEachStayWithinTheTimeout: a pipeline of the
// group commit holds at most MaxBatch IDs, so ten batches of MaxBatch IDs
// go in ten script calls of about 30 ms each. (One call of 100,000 IDs ran
// past the gate's timeout and read as Redis unavailable.)
func TestAdmitBatchesOfMaxBatchEachStayWithinTheTimeout(t *testing.T) {
	srv := redistest.Start(t)
	g := admission.New(srv.Client(t), static(admission.Quota{Limit: 20_000, Window: time.Minute}))
	defer g.Close()
	ctx := t.Context()
	if _, err := g.Admit(ctx, "warm"); err != nil {
		t.Fatal(err)
	}
	var batches []admission.Batch
	for b := range 10 {
		ids := make([]string, admission.MaxBatch)
		for i := range ids {
			ids[i] = fmt.Sprintf("%d-%d", b, i)
		}
		batches = append(batches, admission.Batch{Tenant: fmt.Sprintf("t%d", b), IDs: ids})
	}
	for i, r := range g.AdmitBatches(ctx, batches) {
		if r.Err != nil {
			t.Errorf("batch %d of %d IDs (at most MaxBatch): %v", i, len(batches[i].IDs), r.Err)
		}
	}
}

// TestAdmitBatchesLeavesAnAbandonedRequestAlone: a caller whose context
// ends while its pipeline is out gets its context's error (or the answer,
// when that comes first), and AdmitBatches reads nothing of a request it
// abandoned, which the pipeline's late answer writes (it read its retry
// hint: a data race under -race).
func TestAdmitBatchesLeavesAnAbandonedRequestAlone(t *testing.T) {
	_, hook, g := holdingGate(t)
	if _, err := g.Admit(t.Context(), "warm"); err != nil { // the version check and the script's load
		t.Fatal(err)
	}
	hook.armed.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan []admission.BatchResult)
	go func() {
		done <- g.AdmitBatches(ctx, []admission.Batch{{Tenant: "a", IDs: []string{"1"}}, {Tenant: "b", IDs: []string{"2"}}})
	}()
	<-hook.held
	cancel()
	close(hook.release) // the late answer, unordered with the caller's return
	res := <-done
	for _, r := range res {
		if !errors.Is(r.Err, context.Canceled) && (r.Err != nil || len(r.Decisions) != 1) {
			t.Errorf("%+v, want context.Canceled, or the answer when it came first", r)
		}
	}
}
