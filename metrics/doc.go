// Package metrics exports Prometheus metrics for admitq producers and
// workers.
//
// One Metrics value holds these series:
//
//	admitq_gate_decisions_total{tenant,outcome}    counter: gate decisions, outcome = admitted|deferred|parked|rejected
//	admitq_tasks_processed_total{tenant}            counter: handler runs that ended, failed or not (as asynq counts "processed")
//	admitq_tasks_failed_total{tenant}               counter: handler runs that failed
//	admitq_tasks_started_total{tenant}              counter: handler runs that started, retries included
//	admitq_task_seconds_total{tenant}               counter: worker seconds spent in handler runs that ended
//	admitq_queue_delay_seconds{tenant}              histogram: from a task's slot to the start of its first run
//	admitq_tenant_in_flight{queue,tenant}                 gauge: tasks the dispatcher let in that asynq still holds
//	admitq_tenant_parked{queue,tenant}                    gauge: tasks parked in a dispatched queue, waiting their turn
//	admitq_tenant_oldest_parked_age_seconds{queue,tenant} gauge: how long its oldest parked task has waited; 0 when none is
//	admitq_tenant_worker_seconds{queue,tenant}            gauge: worker time since the tenant was last idle there
//	admitq_tenant_worker_share{queue,tenant}              gauge: its share of the worker time of the queue's active tenants
//	admitq_tenant_weight{queue,tenant}                    gauge: its Quota.Weight (0 read as 1)
//	admitq_tenant_paused{queue,tenant}                    gauge: 1 while its Quota.Paused holds its parked tasks
//	admitq_tenant_held{queue,tenant}                      gauge: 1 while its rate or a downstream throttle (worker.Throttled) holds them
//	admitq_key_in_flight{queue,key}                       gauge: tasks carrying the concurrency key that asynq holds, all tenants'
//	admitq_key_waiting{queue,key}                         gauge: tasks carrying the key that wait their turn
//	admitq_key_paused{queue,key}                          gauge: 1 while the key's Quota.Paused holds its tasks
//	admitq_key_held{queue,key}                            gauge: 1 while a downstream throttle (worker.ThrottledKey) holds them
//
// The four outcomes are the gate's (admission.Outcome): admitted (runs
// now), deferred (waits in asynq's scheduled set for its slot), parked (the task
// waits its turn in a dispatched queue: its tenant's cap, or a fair queue) and rejected
// (not enqueued; the caller holds the task and a retry time).
//
// A producer reports each decision with ObserveDecision; a worker wraps its
// handler in Middleware, and a worker with a gate reports the depth gauges
// with ObserveDispatch (worker.Config.OnDispatch). A process that does both shares one Metrics.
// Metrics is a prometheus.Collector: register it with the registry you
// serve.
//
//	m := metrics.New()
//	prometheus.MustRegister(m)
//
//	// producer
//	info, d, err := client.Enqueue(ctx, tenant, task)
//	if err == nil || errors.Is(err, enqueue.ErrRejected) {
//		m.ObserveDecision(d)
//	}
//
//	// worker
//	w := worker.New(redisOpt, worker.Config{Middleware: []asynq.MiddlewareFunc{m.Middleware()}})
//
// # Label cardinality
//
// Every series but the keys' has a tenant label, so each tenant costs about 24 series
// (3 decision counters, which start at zero, and a parked one once the
// tenant has a task parked; 4 task counters; and a histogram of 14 buckets
// plus +Inf, its sum and count), and a tenant active in a dispatched queue
// 8 gauges more per queue. Past WithMaxTenants distinct tenants (DefaultMaxTenants,
// 1000) further tenants are counted under the label value OtherTenant, so a
// flood of new tenant names cannot grow the registry without bound. To choose
// the label yourself (a plan or a shard instead of the tenant, say), use
// WithTenantLabel. Tasks that carry no tenant are counted under tenant="".
//
// A concurrency key costs 4 gauges per queue while the dispatcher lists it
// there (tasks carrying it wait or run). The dispatcher lists at most
// dispatch.StatsKeys keys a queue, and each reading deletes the series of
// keys it no longer lists, so keys need no bound of their own; they take
// none of the tenants' label values.
//
// # Queueing delay
//
// The delay is measured from the slot the gate gave the task (carried in the
// task header that enqueue stamps) to the moment the worker starts it, on the
// worker's clock. The slot is Redis server time, so a worker whose clock is
// off by x skews the histogram by x. Delays under zero are counted as zero.
// Only a task's first start is observed: reruns (after a failure, a throttled
// retry or a shutdown that put the task back) wait for asynq's backoff or
// for the worker, not for admission. Under a worker.Worker a first start is
// told apart with worker.FirstStart, at one Redis round trip per task.
package metrics
