// Package e2e holds admitq's end-to-end tests: producers enqueue through
// enqueue.Client, workers run through worker.Worker, and everything meets in
// a real redis-server started by internal/redistest.
//
// The tests prove what DESIGN.md promises across packages: a noisy tenant's
// burst is flattened to its quota without losing or repeating a task and
// without holding up a quiet tenant; refused tasks leave no trace in the
// queue; a failed enqueue gives its slot back; and handlers learn the
// tenant. The package has no non-test code.
//
//	go test -race ./internal/e2e/
package e2e
