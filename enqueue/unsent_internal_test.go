package enqueue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// TestUnsentWriteGivesTheSlotBack: a task whose write waits for a pipeline
// when its caller's context ends is never written, so Enqueue gives its
// slot back; the task ahead of it, whose write was sent, is enqueued.
func TestUnsentWriteGivesTheSlotBack(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	spy := &pipelineSpy{hold: make(chan struct{})}
	asynqRDB := srv.Client(t)
	asynqRDB.AddHook(spy)
	q := admission.Quota{Limit: 10, Window: time.Minute}
	g := admission.New(srv.Client(t), admission.StaticQuotas{Default: &q})
	defer g.Close()
	p := newPipelined(asynqRDB)
	p.maxFlight = 1
	c := New(asynq.NewClientFromRedisClient(p), g)
	c.rdb = asynqRDB // as NewFromRedis, with p for its pipelines
	bg := context.Background()

	first := make(chan error, 1)
	go func() {
		_, _, err := c.Enqueue(bg, "acme", asynq.NewTask("t", nil), asynq.TaskID("first"))
		first <- err
	}()
	waitFor(t, func() bool { return spy.pipelines.Load() == 1 }) // first's write holds the flight
	ctx, cancel := context.WithCancel(bg)
	probe := make(chan error, 1)
	go func() {
		_, _, err := c.Enqueue(ctx, "acme", asynq.NewTask("t", nil), asynq.TaskID("probe"))
		probe <- err
	}()
	waitFor(t, func() bool { return queuedCalls(p) == 1 })
	cancel()
	if err := <-probe; !errors.Is(err, context.Canceled) {
		t.Errorf("probe: err = %v, want context.Canceled", err)
	}
	close(spy.hold)
	if err := <-first; err != nil {
		t.Errorf("first: %v", err)
	}

	u, err := g.Usage(bg, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if n := u.InWindow + u.Reserved; n != 1 {
		t.Errorf("the log holds %d entries, want 1 (first): the unsent probe's slot was kept", n)
	}
	in := asynq.NewInspectorFromRedisClient(srv.Client(t))
	if _, err := in.GetTaskInfo("default", "probe"); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Errorf("GetTaskInfo(probe) = %v, want asynq.ErrTaskNotFound", err)
	}
	if _, err := in.GetTaskInfo("default", "first"); err != nil {
		t.Errorf("GetTaskInfo(first) = %v, want the task", err)
	}
}
