// Package e2e holds admitq's end-to-end tests: producers enqueue through
// enqueue.Client, workers run through worker.Worker, and everything meets in
// a real redis-server, or a 3-master Redis Cluster, started by
// internal/redistest.
//
// The tests prove what DESIGN.md promises across packages: a noisy tenant's
// burst is flattened to its quota without losing or repeating a task and
// without holding up a quiet tenant, on one server and on a cluster whose
// masters share the tenants; refused tasks leave no trace in the queue; a
// failed enqueue gives its slot back; handlers learn the tenant; quotas
// changed live reach a running gate on a cluster; and while Redis is frozen
// or killed, every Enqueue returns in bounded time and every task is
// accounted for. The gates run with admission's default timeout. The
// package has no non-test code.
//
//	go test -race ./internal/e2e/
package e2e
