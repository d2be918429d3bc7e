package worker

import (
	"context"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
)

// reconcile runs until close, every interval or so: it walks the tenants
// that may hold permits or parked tasks and, for each, hands free permits
// to parked tasks (a cap was raised, a give-back was lost), moves due
// grants into their queues (their worker died before it could), and checks
// lapsed permits against asynq. Every worker runs one; what they do twice
// is harmless.
func (d *depth) reconcile() {
	for {
		select {
		case <-d.quit:
			return
		case <-time.After(jitter(d.interval)):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*d.interval+5*time.Second)
		d.reconcileAll(ctx)
		cancel()
	}
}

func (d *depth) reconcileAll(ctx context.Context) {
	tenants, err := d.permits.Tenants(ctx)
	if err != nil {
		d.log.Warn("worker: listing capped tenants", "err", err)
		return
	}
	for _, tenant := range tenants {
		select {
		case <-d.quit:
			return
		default:
		}
		d.reconcileTenant(ctx, tenant)
	}
}

func (d *depth) reconcileTenant(ctx context.Context, tenant string) {
	dep, err := d.permits.Reconcile(ctx, tenant)
	if err != nil {
		d.log.Warn("worker: reconciling a tenant's permits", "tenant", tenant, "err", err)
		return
	}
	if d.observe != nil {
		d.observe(dep)
	}
	d.dispatch(dep.Grants)
	for _, g := range dep.Due {
		d.start(g)
	}
	for _, ref := range dep.Lapsed {
		d.lapsed(tenant, ref)
	}
	if dep.InFlight == 0 && dep.Parked == 0 && len(dep.Due) == 0 {
		if err := d.permits.Forget(ctx, tenant); err != nil {
			d.log.Warn("worker: forgetting an idle tenant", "tenant", tenant, "err", err)
		}
	}
}

// lapsed acts on a permit whose lease is over. A task still waiting in
// its queue keeps it; one asynq is done with, or that was deleted from
// outside, gives it back; and an active one whose worker stopped renewing
// its lease (the worker died) gives it back too: asynq will retry that
// task once its own lease runs out, and when it runs again it takes a
// permit back (Permits.Hold).
func (d *depth) lapsed(tenant string, ref admission.Ref) {
	info, err := d.insp.GetTaskInfo(ref.Queue, ref.ID)
	if err == nil && info.State == asynq.TaskStateActive {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.finish(ctx, tenant, ref)
		return
	}
	d.conclude(tenant, ref, info, err)
}
