// Package admission is per-tenant admission control on Redis: a
// sliding-window log per tenant that decides whether a piece of work runs
// now, waits for a reserved slot, waits its turn, or is refused.
//
// Each tenant's log is a sorted set of entry IDs scored by their slot, in
// Redis server time. One atomic Lua script trims it, finds the next free
// slot and records it, so any number of producers share one exact limit:
// no interval of length Window ever holds more than Limit slots. A request
// that finds the window full gets the slot at which the oldest entry
// blocking it leaves the window (Deferred), unless that is further ahead
// than MaxDelay (Rejected, with the time a retry could succeed). In a
// queue that package dispatch serves, a task that must wait its turn (its
// tenant at MaxInFlight, or a fair queue full) is Parked: it waits, durably
// and in order, and is charged its slot when it goes in.
//
// So every decision has one of four outcomes: Admitted, Deferred, Parked or
// Rejected. Admit, AdmitID and AdmitBatch give the first two and Rejected;
// Parked comes only from the calls that carry tasks (package enqueue).
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	gate := admission.New(rdb, admission.NewRedisQuotas(rdb))
//	defer gate.Close()
//
//	d, err := gate.Admit(ctx, "acme")
//	switch {
//	case err != nil:
//		// Redis is unavailable (FailClosed), or the tenant or quota is bad.
//	case d.Outcome == admission.Admitted:
//		// run now
//	case d.Outcome == admission.Deferred:
//		// run at d.At, not before
//	case d.Outcome == admission.Parked:
//		// waits its turn in a dispatched queue (through package enqueue)
//	case d.Outcome == admission.Rejected:
//		// refused: retry after d.At, e.g. answer 429 with Retry-After
//	}
//
// Work that will not start before a later time (a task scheduled ahead) is
// charged for that time with AdmitAt or AdmitBatchAt.
//
// Quotas come from a Quotas source: StaticQuotas for a fixed table, or
// RedisQuotas, which operators change live and gates see within a second.
// A quota whose Limit is NoLimit has no rate limit: the gate admits its
// tenant's work locally, without Redis, and the quota only caps, weighs or
// pauses the tenant's tasks where package dispatch serves them.
//
// Concurrent calls are group-committed into shared Redis pipelines
// (AdmitBatches asks many tenants' batches at once, one script call a
// Redis server), a
// tenant that was just rejected is answered from a local cache until its
// retry time, and a breaker with an optional fail-open local limiter keeps
// callers moving while Redis is down. The gate knows nothing of asynq;
// package enqueue puts it in front of asynq.
package admission
