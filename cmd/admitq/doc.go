// Command admitq runs admitq's demo, a worker, one-off enqueues, and manages
// per-tenant quotas in Redis. See docs/cli.md.
package main
