package enqueue

// TenantHeader is the asynq task header that carries the tenant a task was
// admitted for. Enqueue sets it; the worker package reads it.
const TenantHeader = "admitq-tenant"

// SlotHeader is the asynq task header that carries the task's slot: the
// time, in Unix milliseconds, from which the gate let it run; for a task
// that waits its turn in a dispatched queue, the time of its Enqueue (by
// Redis's clock when the task is written after its park, by the
// producer's when its park writes it). A worker measures queueing delay
// from it (package metrics).
const SlotHeader = "admitq-slot"

// KeysHeader is the asynq task header that carries the concurrency keys
// the task was enqueued with (Keys): sorted, each once, separated by a
// newline ("\n"), which no key holds. Enqueue sets it on a task with keys
// and removes it from one without, and package worker reads it
// (worker.Keys, worker.ThrottledKey).
const KeysHeader = "admitq-keys"
