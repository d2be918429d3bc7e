// Package demo is the scenario behind admitq demo: producers for a few
// tenants, one of them far over its quota, send tasks through the gate to a
// worker, and the run checks afterwards that no tenant got more than its
// limit in any window and that no task was lost.
//
// It lives apart from the command so that tests drive it directly; the
// command only prints.
package demo
