// Package worktime measures worker time from task runs, for the demo, the
// bench and the dispatcher's tests: each tenant's part of an interval, and
// the interval in which two tenants both had tasks still to start, the one
// in which their shares say something of a scheduler.
package worktime
