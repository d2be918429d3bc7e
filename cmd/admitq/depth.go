package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
)

// dispatchStatus is a dispatched queue in status: its workers with a gate,
// and the tenants with tasks parked or in flight there.
type dispatchStatus struct {
	Queue       string           `json:"queue"`
	Workers     int              `json:"workers"`     // live workers with a gate
	Fair        bool             `json:"fair"`        // one of them is fair
	Concurrency int              `json:"concurrency"` // the fair workers' total
	Tenants     []dispatchTenant `json:"tenants"`
	// Unserved: tasks are parked here and no live worker with a gate
	// serves the queue, so none of them moves until one does.
	Unserved bool `json:"unserved"`
}

type dispatchTenant struct {
	Tenant string `json:"tenant"`
	Parked int    `json:"parked"`
	// OldestParkedAge is how long the first parked task has waited, in
	// seconds; absent when nothing is parked.
	OldestParkedAge *float64 `json:"oldest_parked_age_s,omitempty"`
	InFlight        int      `json:"in_flight"`
	MaxInFlight     int      `json:"max_in_flight"` // 0: no cap
	AtCap           bool     `json:"at_cap"`
	Weight          float64  `json:"weight"`
	// WorkerShare is the tenant's part of the worker time of the tenants
	// active in the queue, 0 to 1.
	WorkerShare float64 `json:"worker_share"`
}

// readDispatch reads every dispatched queue's state.
func (s *statusReader) readDispatch(ctx context.Context) ([]dispatchStatus, error) {
	g := admission.New(s.rdb, s.quotas, s.opts...)
	defer g.Close()
	d := dispatch.New(s.rdb, g, nil)
	queues, err := d.Queues(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]dispatchStatus, 0, len(queues))
	for _, q := range queues {
		qs, err := d.Stats(ctx, q)
		if err != nil {
			return out, err
		}
		ds := dispatchStatus{Queue: q, Workers: qs.Workers, Fair: qs.Fair, Concurrency: qs.Concurrency, Tenants: []dispatchTenant{}}
		parked := 0
		for _, t := range qs.Tenants {
			dt := dispatchTenant{Tenant: t.Tenant, Parked: t.Waiting, InFlight: t.InFlight, MaxInFlight: t.Cap,
				AtCap: t.AtCap, Weight: t.Weight, WorkerShare: t.Share}
			if !t.OldestWaiting.IsZero() {
				age := qs.Now.Sub(t.OldestWaiting).Seconds()
				dt.OldestParkedAge = &age
			}
			parked += t.Waiting
			ds.Tenants = append(ds.Tenants, dt)
		}
		ds.Unserved = parked > 0 && qs.Workers == 0
		out = append(out, ds)
	}
	return out, nil
}

// writeDispatch writes each dispatched queue's tenants: parked, in flight
// against their cap, weight and share of worker time, and warns of parked
// tasks that no worker with a gate will move.
func writeDispatch(w io.Writer, r statusReport) {
	for _, q := range r.Dispatch {
		kind := "caps only"
		if q.Fair {
			kind = "fair, concurrency " + strconv.Itoa(q.Concurrency)
		}
		fmt.Fprintf(w, "queue %s: %d workers with a gate (%s)\n", q.Queue, q.Workers, kind)
		if q.Unserved {
			fmt.Fprintf(w, "warning: tasks are parked in queue %q and no worker with a Gate serves it: none moves until one does (worker.Config{Gate: g})\n", q.Queue)
		}
		if len(q.Tenants) == 0 {
			fmt.Fprintln(w)
			continue
		}
		fmt.Fprintln(w, "TENANT\tPARKED\tOLDEST PARKED\tIN FLIGHT\tWEIGHT\tWORKER SHARE")
		for _, t := range q.Tenants {
			oldest := "-"
			if t.OldestParkedAge != nil {
				oldest = (time.Duration(*t.OldestParkedAge * float64(time.Second))).Round(time.Millisecond).String()
			}
			flight := strconv.Itoa(t.InFlight)
			if t.MaxInFlight > 0 {
				flight += "/" + strconv.Itoa(t.MaxInFlight)
				if t.AtCap {
					flight += " (at cap)"
				}
			}
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%g\t%.0f%%\n", tableTenant(t.Tenant), t.Parked, oldest, flight, t.Weight, 100*t.WorkerShare)
		}
		fmt.Fprintln(w)
	}
}
