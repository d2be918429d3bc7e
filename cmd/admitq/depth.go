package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
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
	// TenantsWaiting is how many tenants have tasks parked that may go in
	// by their own limits, held back for a while, or waiting on keys:
	// Tenants lists at most dispatch.StatsTenants of them, the next to go
	// in first, and the others are MoreWaiting.
	TenantsWaiting int `json:"tenants_waiting"`
	MoreWaiting    int `json:"more_waiting"`
	// Keys are the queue's concurrency keys with tasks parked or in
	// flight, by name, at most dispatch.StatsKeys (status.go).
	Keys []dispatchKey `json:"keys"`
	// Unserved: tasks are parked here and no live worker with a gate
	// serves the queue, so none of them moves until one does.
	Unserved bool `json:"unserved"`
	// Ungated is how many asynq servers process the queue without a gate.
	Ungated int `json:"servers_without_gate"`
}

type dispatchTenant struct {
	Tenant string `json:"tenant"`
	Parked int    `json:"parked"`
	// OldestParkedAge is how long the first parked task has waited, in
	// seconds; absent when nothing is parked.
	OldestParkedAge *float64 `json:"oldest_parked_age_s,omitempty"`
	InFlight        int      `json:"in_flight"`
	// MaxInFlight is the cap in the tenant's quota now (0: no cap): the
	// dispatcher applies a changed cap from the tenant's next park or
	// finish. AtCap reports InFlight >= MaxInFlight > 0, and OverCap
	// InFlight > MaxInFlight > 0: a cap lowered below the tasks already in
	// flight, which drain to it.
	MaxInFlight int  `json:"max_in_flight"`
	AtCap       bool `json:"at_cap"`
	OverCap     bool `json:"over_cap"`
	// Paused reports that the tenant's Quota.Paused holds its parked
	// tasks; Held that they are held back for a while, by its rate or a
	// downstream throttle (worker.Throttled).
	Paused bool    `json:"paused"`
	Held   bool    `json:"held"`
	Weight float64 `json:"weight"`
	// WorkerShare is the tenant's part of the worker time of the tenants
	// active in the queue, 0 to 1.
	WorkerShare float64 `json:"worker_share"`
	// DrainRate is how fast the tenant's parked tasks drain, in tasks a
	// second, smoothed over status --watch's rounds (net of new arrivals;
	// negative while they grow), and DrainETA the seconds until none is
	// parked at that rate. Both are absent outside --watch, and on its
	// first round; DrainETA also while nothing drains.
	DrainRate *float64 `json:"drain_per_s,omitempty"`
	DrainETA  *float64 `json:"drain_eta_s,omitempty"`
}

// readDispatch reads every dispatched queue's state. keyQuotas are the
// stored key quotas, whose caps and pauses the keys' rows show.
func (s *statusReader) readDispatch(ctx context.Context, keyQuotas map[string]admission.Quota) ([]dispatchStatus, error) {
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
		caps, err := s.caps(ctx, qs.Tenants)
		if err != nil {
			return out, err
		}
		ds := dispatchStatus{Queue: q, Workers: qs.Workers, Fair: qs.Fair, Concurrency: qs.Concurrency, Ungated: qs.Ungated,
			Tenants: []dispatchTenant{}, TenantsWaiting: qs.TenantsWaiting}
		parked, waiting := 0, 0
		for _, t := range qs.Tenants {
			dt := dispatchTenant{Tenant: t.Tenant, Parked: t.Waiting, InFlight: t.InFlight, MaxInFlight: caps[t.Tenant],
				Paused: t.Paused, Held: t.Held, Weight: t.Weight, WorkerShare: t.Share}
			dt.AtCap = dt.MaxInFlight > 0 && dt.InFlight >= dt.MaxInFlight
			dt.OverCap = dt.MaxInFlight > 0 && dt.InFlight > dt.MaxInFlight
			if !t.OldestWaiting.IsZero() {
				age := qs.Now.Sub(t.OldestWaiting).Seconds()
				dt.OldestParkedAge = &age
			}
			parked += t.Waiting
			if t.Waiting > 0 && !t.Paused && !(t.Cap > 0 && t.InFlight >= t.Cap) {
				waiting++ // one of TenantsWaiting
			}
			ds.Tenants = append(ds.Tenants, dt)
		}
		if qs.TenantsWaiting > dispatch.StatsTenants {
			ds.MoreWaiting = max(qs.TenantsWaiting-waiting, 0)
		}
		ds.Keys = toDispatchKeys(qs, keyQuotas)
		ds.Unserved = parked > 0 && qs.Workers == 0
		out = append(out, ds)
	}
	return out, nil
}

// caps returns each tenant's cap as its quota has it now (its own, else
// the default's), or, for a tenant whose quota cannot be read, the cap the
// dispatcher applies.
func (s *statusReader) caps(ctx context.Context, tenants []dispatch.TenantStats) (map[string]int, error) {
	caps := make(map[string]int, len(tenants))
	if len(tenants) == 0 {
		return caps, nil
	}
	names := make([]string, len(tenants))
	for i, t := range tenants {
		names[i], caps[t.Tenant] = t.Tenant, t.Cap
	}
	own, err := s.quotas.GetBatch(ctx, names)
	if err != nil {
		return caps, err
	}
	def, derr := s.quotas.GetDefault(ctx)
	for i, r := range own {
		switch {
		case r.Err == nil:
			caps[names[i]] = r.Quota.MaxInFlight
		case errors.Is(r.Err, admission.ErrNoQuota) && derr == nil:
			caps[names[i]] = def.MaxInFlight
		}
	}
	return caps, nil
}

// flightOfCap is a tenant's tasks in flight against its quota's cap,
// saying when it is at the cap, or over it (a cap lowered below the tasks
// already in flight, or tasks run from outside): "2/2 (at cap)", "3/1,
// over its cap: draining".
func flightOfCap(inFlight, limit int) string {
	s := strconv.Itoa(inFlight)
	if limit > 0 {
		s += "/" + strconv.Itoa(limit)
		switch {
		case inFlight > limit:
			s += ", over its cap: draining"
		case inFlight == limit:
			s += " (at cap)"
		}
	}
	return s
}

// writeDispatch writes each dispatched queue's tenants: parked, in flight
// against their cap, weight and share of worker time, and warns of parked
// tasks that no worker with a gate will move.
// parkedText is a tenant's parked tasks, and what holds them when not
// their turn alone: "4 (paused)", "2 (held)".
func parkedText(t dispatchTenant) string {
	switch {
	case t.Paused:
		return strconv.Itoa(t.Parked) + " (paused)"
	case t.Held:
		return strconv.Itoa(t.Parked) + " (held)"
	}
	return strconv.Itoa(t.Parked)
}

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
		if q.Fair && q.Ungated > 0 {
			fmt.Fprintf(w, "warning: %d asynq servers without a Gate process fair queue %q: they take its tasks out of turn and add no room (worker.Config{Gate: g, Fair: true})\n", q.Ungated, q.Queue)
		}
		if len(q.Tenants) == 0 {
			fmt.Fprintln(w)
			continue
		}
		drains := slices.ContainsFunc(q.Tenants, func(t dispatchTenant) bool { return t.DrainRate != nil })
		header := "TENANT\tPARKED\tOLDEST PARKED\tIN FLIGHT\tWEIGHT\tWORKER SHARE"
		if drains {
			header += "\tDRAIN\tEMPTY IN"
		}
		fmt.Fprintln(w, header)
		for _, t := range q.Tenants {
			oldest := "-"
			if t.OldestParkedAge != nil {
				oldest = (time.Duration(*t.OldestParkedAge * float64(time.Second))).Round(time.Millisecond).String()
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%g\t%.0f%%", tableTenant(t.Tenant), parkedText(t), oldest, flightOfCap(t.InFlight, t.MaxInFlight), t.Weight, 100*t.WorkerShare)
			if drains {
				fmt.Fprintf(w, "\t%s\t%s", drainRateText(t), drainETAText(t))
			}
			fmt.Fprintln(w)
		}
		if q.MoreWaiting > 0 {
			fmt.Fprintf(w, "… and %d more tenants with tasks parked (status lists the first %d of a queue, the next to go in first)\n", q.MoreWaiting, dispatch.StatsTenants)
		}
		fmt.Fprintln(w)
		if len(q.Keys) > 0 {
			writeDispatchKeys(w, q) // status.go
			fmt.Fprintln(w)
		}
	}
}
