package admission_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/freshid"
	"github.com/admitq/admitq/internal/redistest"
)

// TestAbandonedFreshIDHoldsNoSlot: IDs the caller marks as its own new ones
// (freshid, as package enqueue does for the task IDs it makes) are given
// back like the gate's own when the caller leaves before the decision: no
// retry can ever ask for them. An ID the mark does not name keeps its slot,
// for its retry, though its context is marked (code that an Enqueue call
// reaches, such as a custom Quotas, admitting its own IDs). Redis is paused
// so that every call leaves while its script waits.
func TestAbandonedFreshIDHoldsNoSlot(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	g := admission.New(srv.Client(t), static(admission.Quota{Limit: 1000, Window: time.Minute}))
	defer g.Close()
	if _, err := g.AdmitID(t.Context(), "warm", "up"); err != nil { // connections up before the pause
		t.Fatal(err)
	}
	srv.Pause()
	// A context marked with another ID, and an ID of the caller's own.
	ctx, cancel := context.WithTimeout(freshid.Mark(t.Context(), "other"), 20*time.Millisecond)
	if _, err := g.AdmitID(ctx, "owned", "own"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AdmitID on a paused Redis = %v, want context.DeadlineExceeded", err)
	}
	cancel()
	for i := range 5 {
		id := "id" + strconv.Itoa(i)
		ctx, cancel := context.WithTimeout(freshid.Mark(t.Context(), id), 20*time.Millisecond)
		_, err := g.AdmitID(ctx, "fresh", id)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("AdmitID on a paused Redis = %v, want context.DeadlineExceeded", err)
		}
		cancel()
	}
	time.Sleep(50 * time.Millisecond)
	srv.Resume()
	deadline := time.Now().Add(5 * time.Second)
	for n := int64(-1); n != 0; n = rdb.ZCard(t.Context(), "admitq:{fresh}:log").Val() {
		if time.Now().After(deadline) {
			t.Fatalf("the log holds %d entries of abandoned calls, want none", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := rdb.ZCard(t.Context(), "admitq:{owned}:log").Val(); n != 1 {
		t.Errorf("the log of the caller's own ID holds %d entries, want 1: it keeps its slot for its retry", n)
	}
}
