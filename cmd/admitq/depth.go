package main

import (
	"fmt"
	"io"
	"time"

	"github.com/admitq/admitq/admission"
)

// depthStatus is a capped tenant's share of the worker queues, in status.
type depthStatus struct {
	InFlight *int `json:"in_flight,omitempty"` // permits held; absent without a cap
	Parked   *int `json:"parked,omitempty"`    // tasks waiting for a permit
	// OldestParkedAge is how long the first parked task has waited, in
	// seconds; absent when nothing is parked.
	OldestParkedAge *float64 `json:"oldest_parked_age_s,omitempty"`
}

func toDepthStatus(u admission.Usage) depthStatus {
	if u.Quota.MaxInFlight == 0 {
		return depthStatus{}
	}
	d := depthStatus{InFlight: &u.InFlight, Parked: &u.Parked}
	if !u.OldestParked.IsZero() {
		age := u.Now.Sub(u.OldestParked).Seconds()
		d.OldestParkedAge = &age
	}
	return d
}

// writeDepth writes the capped tenants' in flight / cap, parked and the
// oldest parked task's age, when there are any.
func writeDepth(w io.Writer, r statusReport) {
	header := false
	for _, t := range r.Tenants {
		if t.InFlight == nil || t.Quota == nil {
			continue
		}
		if !header {
			fmt.Fprintln(w, "TENANT\tIN FLIGHT\tPARKED\tOLDEST PARKED")
			header = true
		}
		oldest := "-"
		if t.OldestParkedAge != nil {
			oldest = (time.Duration(*t.OldestParkedAge * float64(time.Second))).Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "%s\t%d/%d\t%d/%d\t%s\n", t.Tenant, *t.InFlight, t.Quota.MaxInFlight, *t.Parked, t.Quota.MaxParked, oldest)
	}
	if header {
		fmt.Fprintln(w)
	}
}
