package worker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
	"github.com/admitq/admitq/worker"
)

// A worker with a gate pointed at one node of a Redis Cluster through a
// plain client refuses to start, saying so, rather than run the
// dispatcher's scripts against one node.
func TestStartWithAGateChecksTheServer(t *testing.T) {
	c := redistest.StartCluster(t)
	node := c.Nodes()[0].Client(t)
	g := admission.New(node, admission.StaticQuotas{Default: &admission.Quota{Limit: 10, Window: 1e9}})
	defer g.Close()
	w := worker.NewFromRedis(node, worker.Config{Gate: g, Concurrency: 1})
	err := w.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return nil }))
	if err == nil {
		w.Shutdown()
		t.Fatal("a worker with a gate started on a cluster node through a plain client")
	}
	if !errors.Is(err, admission.ErrClusterNode) {
		t.Errorf("Start: %v; want an error wrapping admission.ErrClusterNode", err)
	}
}
