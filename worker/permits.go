package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
)

// Defaults of the depth settings (Config.Gate).
const (
	// DefaultPermitLease is how long a running task's permit outlives its
	// worker's last renewal when Config.PermitLease is zero.
	DefaultPermitLease = 10 * time.Second

	// DefaultReconcileInterval is how often each worker reconciles the
	// capped tenants' permits when Config.ReconcileInterval is zero.
	DefaultReconcileInterval = 500 * time.Millisecond

	// DefaultDepthTaskCheckInterval is the TaskCheckInterval of a worker
	// with a Gate when Config.TaskCheckInterval is zero: a task released
	// from the parked backlog must reach an idle worker within tens of
	// milliseconds, not asynq's second.
	DefaultDepthTaskCheckInterval = 20 * time.Millisecond
)

// writeGrace is how long after its slot a granted task may still be
// missing from asynq: its producer parked it and may still be writing it.
// Past that, a missing task is gone and its permit is handed on.
const writeGrace = 30 * time.Second

// depth gives back permits as tasks end and moves parked tasks into their
// queues when they get one (see Config.Gate). Its middleware holds a
// running task's permit; its reconciler (reconcile.go) catches what no
// middleware saw: lapsed leases, tasks deleted or archived from outside,
// grants whose worker died, raised caps.
type depth struct {
	permits  *admission.Permits
	insp     *asynq.Inspector
	lease    time.Duration
	interval time.Duration
	log      *slog.Logger
	observe  func(admission.Depth) // Config.OnDepth; nil means none

	quit chan struct{}
	wg   sync.WaitGroup // settles, grants and the reconciler
	mu   sync.Mutex
	// timers are grants waiting for their slot; stopped on close, when
	// the due set keeps them for another worker's reconciler.
	timers map[*time.Timer]struct{}
}

func newDepth(g *admission.Gate, rdb redis.UniversalClient, lease, interval time.Duration, log *slog.Logger) *depth {
	return &depth{
		permits:  g.Permits(),
		insp:     asynq.NewInspectorFromRedisClient(rdb),
		lease:    lease,
		interval: interval,
		log:      log,
		quit:     make(chan struct{}),
		timers:   make(map[*time.Timer]struct{}),
	}
}

// close stops the reconciler and pending grant timers, and waits for the
// give-backs of tasks that have ended.
func (d *depth) close() {
	close(d.quit)
	d.mu.Lock()
	for t := range d.timers {
		if t.Stop() {
			d.wg.Done()
		}
	}
	clear(d.timers)
	d.mu.Unlock()
	d.wg.Wait()
}

// goTracked runs f in a goroutine that close waits for.
func (d *depth) goTracked(f func()) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		f()
	}()
}

// middleware holds the permit of a capped tenant's task while it runs,
// renewing its lease, and once the handler returns, gives the permit back
// if asynq is done with the task.
func (d *depth) middleware(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		tenant := Tenant(ctx)
		if tenant == "" {
			return next.ProcessTask(ctx, t)
		}
		if q, err := d.permits.Quota(ctx, tenant); err != nil || q.MaxInFlight == 0 {
			return next.ProcessTask(ctx, t) // no cap: nothing to hold
		}
		id, _ := asynq.GetTaskID(ctx)
		queue, _ := asynq.GetQueueName(ctx)
		ref := admission.Ref{ID: id, Queue: queue}
		stop := d.hold(ctx, tenant, ref)
		defer func() { // a panic too: the Worker recovers it outside
			stop()
			d.goTracked(func() { d.settle(tenant, ref) })
		}()
		return next.ProcessTask(ctx, t)
	})
}

// runningLease is the lease of a running task: the configured lease, or
// less when the task's deadline comes sooner, plus a second's margin, so
// that a dead worker's permit lapses by then at the latest.
func (d *depth) runningLease(ctx context.Context) time.Duration {
	l := d.lease
	if dl, ok := ctx.Deadline(); ok {
		l = min(l, time.Until(dl)+time.Second)
	}
	return max(l, time.Second)
}

// hold takes or renews the task's permit at once and then every third of
// its lease, until the returned stop is called.
func (d *depth) hold(ctx context.Context, tenant string, ref admission.Ref) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			lease := d.runningLease(ctx)
			hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lease/3)
			if err := d.permits.Hold(hctx, tenant, ref, lease); err != nil {
				d.log.Warn("worker: renewing a task's permit", "tenant", tenant, "task_id", ref.ID, "err", err)
			}
			cancel()
			select {
			case <-done:
				return
			case <-time.After(lease / 3):
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// settle decides what the permit of a task whose handler has returned
// becomes, from asynq's own record of the task once it has left the active
// list: given back when asynq is done with it (completed, archived,
// revoked, deleted), kept when it waits for a retry or was put back by a
// shutdown. A task still active after a few seconds is left to its lease
// and the reconciler.
func (d *depth) settle(tenant string, ref admission.Ref) {
	wait := time.Millisecond
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := d.insp.GetTaskInfo(ref.Queue, ref.ID)
		if err == nil && info.State == asynq.TaskStateActive && time.Now().Before(deadline) {
			time.Sleep(wait)
			wait = min(2*wait, 50*time.Millisecond)
			continue
		}
		d.conclude(tenant, ref, info, err)
		return
	}
}

// conclude acts on what asynq says of a task that holds a permit: it gives
// the permit back and hands it on when the task is gone, renews it for
// one still waiting, and, when revoke is set, takes it from an active
// task whose worker stopped renewing it.
func (d *depth) conclude(tenant string, ref admission.Ref, info *asynq.TaskInfo, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	switch {
	case gone(err) || err == nil && (info.State == asynq.TaskStateCompleted || info.State == asynq.TaskStateArchived):
		d.finish(ctx, tenant, ref)
	case err != nil:
		d.log.Warn("worker: reading a task's state", "tenant", tenant, "task_id", ref.ID, "err", err)
	case info.State == asynq.TaskStateActive:
		// Left to the lease: the reconciler takes the permit back if no
		// worker renews it.
	default: // pending, scheduled, retry, aggregating: it runs again
		if err := d.permits.Renew(ctx, tenant, ref, d.permits.WaitLease()); err != nil {
			d.log.Warn("worker: renewing a waiting task's permit", "tenant", tenant, "task_id", ref.ID, "err", err)
		}
	}
}

// gone reports whether err says asynq has no such task.
func gone(err error) bool {
	return errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound)
}

// finish gives back ref's permit and moves the parked tasks it frees into
// their queues.
func (d *depth) finish(ctx context.Context, tenant string, ref admission.Ref) {
	dep, err := d.permits.Finish(ctx, tenant, ref)
	if err != nil {
		// The lease lapses and a reconciler gives it back.
		d.log.Warn("worker: giving back a task's permit", "tenant", tenant, "task_id", ref.ID, "err", err)
		return
	}
	d.dispatch(dep.Grants)
}

// dispatch moves granted tasks into their queues: at once, or by a timer
// at their slot.
func (d *depth) dispatch(grants []admission.Grant) {
	for _, g := range grants {
		wait := g.At.Sub(g.Now)
		if wait <= 0 {
			d.start(g)
			continue
		}
		d.mu.Lock()
		select {
		case <-d.quit:
			d.mu.Unlock()
			continue // the due set keeps it for a reconciler
		default:
		}
		d.wg.Add(1)
		var t *time.Timer
		t = time.AfterFunc(wait, func() {
			defer d.wg.Done()
			d.mu.Lock()
			delete(d.timers, t)
			d.mu.Unlock()
			d.start(g)
		})
		d.timers[t] = struct{}{}
		d.mu.Unlock()
	}
}

// start moves a granted task from asynq's scheduled set, where it was
// parked, to pending, and acknowledges the grant. Any worker may do it,
// any number of times: a task no longer scheduled is acknowledged as it
// is, and only a scheduled task is run (an archived one must stay so).
func (d *depth) start(g admission.Grant) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := d.insp.GetTaskInfo(g.Ref.Queue, g.Ref.ID)
	if err == nil && info.State == asynq.TaskStateScheduled {
		if err = d.insp.RunTask(g.Ref.Queue, g.Ref.ID); err != nil {
			// Another worker moved it first, or it went meanwhile:
			// asynq's record says which.
			info, err = d.insp.GetTaskInfo(g.Ref.Queue, g.Ref.ID)
		}
	}
	switch {
	case gone(err):
		if g.Now.Sub(g.At) < writeGrace {
			// Its producer may not have written it yet: look again soon.
			_ = d.permits.Postpone(ctx, g.Tenant, g.Ref, time.Now().Add(time.Second))
			return
		}
		d.finish(ctx, g.Tenant, g.Ref)
	case err != nil:
		d.log.Warn("worker: moving a granted task into its queue", "tenant", g.Tenant, "task_id", g.Ref.ID, "err", err)
	case info.State == asynq.TaskStateCompleted || info.State == asynq.TaskStateArchived:
		d.finish(ctx, g.Tenant, g.Ref)
	case info.State == asynq.TaskStateScheduled:
		// RunTask failed and the task is still parked: the grant stays
		// due, for a reconciler to try again.
	default:
		if err := d.permits.Started(ctx, g.Tenant, g.Ref); err != nil {
			d.log.Warn("worker: acknowledging a grant", "tenant", g.Tenant, "task_id", g.Ref.ID, "err", err)
		}
	}
}

// jitter returns d give or take a fifth, so that workers' reconcilers
// spread out.
func jitter(d time.Duration) time.Duration {
	return d*4/5 + rand.N(d*2/5+1)
}
