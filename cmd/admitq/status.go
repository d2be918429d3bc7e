package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/admitq/admitq/admission"
)

func (a *app) newStatusCmd() *cobra.Command {
	var asJSON, watch bool
	cmd := &cobra.Command{
		Use:   "status [TENANT...] [--json] [--watch]",
		Short: "Show tenants' windows and asynq's queues",
		Long: `For each tenant: its quota, the entries in its window, the reservations ahead
of now and the next free slot. With no TENANT, every tenant with a quota of
its own. Then asynq's queues: tasks pending, scheduled and active.

--watch redraws every second until interrupted; with --json it prints one
JSON object per line.`,
		RunE: func(cmd *cobra.Command, tenants []string) error {
			if err := validateTenants(tenants...); err != nil {
				return err
			}
			rdb, _, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			quotas := admission.NewRedisQuotas(rdb, a.gateOptions()...)
			gate := admission.New(rdb, quotas, a.gateOptions()...)
			defer gate.Close()
			s := &statusReader{rdb: rdb, gate: gate, quotas: quotas, insp: asynq.NewInspectorFromRedisClient(rdb)}
			if !watch {
				r, err := s.read(cmd.Context(), tenants)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(a.stdout, r, true)
				}
				return writeStatus(a.stdout, r)
			}
			return a.watchStatus(cmd.Context(), s, tenants, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&watch, "watch", false, "redraw every second until interrupted")
	return cmd
}

func (a *app) watchStatus(ctx context.Context, s *statusReader, tenants []string, asJSON bool) error {
	clear := a.colorful(a.stdout) && !asJSON
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for first := true; ; first = false {
		r, err := s.read(ctx, tenants)
		if ctx.Err() != nil {
			return nil // interrupted: the normal end of a watch
		}
		if err != nil {
			return err
		}
		switch {
		case asJSON:
			err = writeJSON(a.stdout, r, false)
		case clear:
			fmt.Fprint(a.stdout, "\x1b[H\x1b[2J")
			err = writeStatus(a.stdout, r)
		default:
			if !first {
				fmt.Fprintln(a.stdout)
			}
			err = writeStatus(a.stdout, r)
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// statusReport is what status prints, and its JSON form.
type statusReport struct {
	Time    time.Time      `json:"time"` // Redis server time
	Tenants []tenantStatus `json:"tenants"`
	Queues  []queueStatus  `json:"queues"`
}

type tenantStatus struct {
	Tenant      string     `json:"tenant"`
	Quota       *quotaJSON `json:"quota"`     // null when the tenant has none
	Default     bool       `json:"default"`   // the quota is the default
	InWindow    int        `json:"in_window"` // entries in (now-window, now]
	Reserved    int        `json:"reserved"`  // reservations after now
	NextFree    *time.Time `json:"next_free"` // when a request arriving now would get a slot
	Error       string     `json:"error,omitempty"`
	depthStatus            // depth.go: in flight and parked, for capped tenants
}

type queueStatus struct {
	Queue     string `json:"queue"`
	Pending   int    `json:"pending"`
	Scheduled int    `json:"scheduled"`
	Active    int    `json:"active"`
	Retry     int    `json:"retry"`
}

type statusReader struct {
	rdb    redis.UniversalClient
	gate   *admission.Gate
	quotas *admission.RedisQuotas
	insp   *asynq.Inspector
}

func (s *statusReader) read(ctx context.Context, tenants []string) (statusReport, error) {
	all, err := s.quotas.List(ctx)
	if err != nil {
		return statusReport{}, err
	}
	if len(tenants) == 0 {
		for t := range all.Tenants {
			tenants = append(tenants, t)
		}
		slices.Sort(tenants)
	}
	r := statusReport{Tenants: []tenantStatus{}, Queues: []queueStatus{}}
	for _, t := range tenants {
		ts := tenantStatus{Tenant: t}
		u, err := s.gate.Usage(ctx, t)
		if err != nil {
			ts.Error = err.Error()
			if !errors.Is(err, admission.ErrNoQuota) {
				return statusReport{}, err
			}
			r.Tenants = append(r.Tenants, ts)
			continue
		}
		q := toQuotaJSON(u.Quota)
		_, own := all.Tenants[t]
		ts.Quota, ts.Default = &q, !own
		ts.InWindow, ts.Reserved = u.InWindow, u.Reserved
		ts.depthStatus = toDepthStatus(u)
		next := u.NextFree
		ts.NextFree = &next
		r.Time = u.Now
		r.Tenants = append(r.Tenants, ts)
	}
	if r.Time.IsZero() {
		if now, err := s.rdb.Time(ctx).Result(); err == nil {
			r.Time = now
		}
	}
	queues, err := s.insp.Queues()
	if err != nil {
		return statusReport{}, fmt.Errorf("asynq queues: %w", err)
	}
	slices.Sort(queues)
	for _, q := range queues {
		info, err := s.insp.GetQueueInfo(q)
		if err != nil {
			return statusReport{}, fmt.Errorf("asynq queue %q: %w", q, err)
		}
		r.Queues = append(r.Queues, queueStatus{
			Queue: q, Pending: info.Pending, Scheduled: info.Scheduled, Active: info.Active, Retry: info.Retry,
		})
	}
	return r, nil
}

func writeStatus(w io.Writer, r statusReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(r.Tenants) == 0 {
		fmt.Fprintln(tw, "no tenant has a quota of its own")
	} else {
		fmt.Fprintln(tw, "TENANT\tQUOTA\tIN WINDOW\tAHEAD\tNEXT FREE")
	}
	for _, t := range r.Tenants {
		if t.Quota == nil {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\n", t.Tenant, "no quota")
			continue
		}
		q := t.Quota.String()
		if t.Default {
			q += " (default)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%s\n", t.Tenant, q, t.InWindow, t.Quota.Limit, t.Reserved, nextFree(r.Time, *t.NextFree))
	}
	fmt.Fprintln(tw)
	writeDepth(tw, r)
	if len(r.Queues) == 0 {
		fmt.Fprintln(tw, "no asynq queues")
	} else {
		fmt.Fprintln(tw, "QUEUE\tPENDING\tSCHEDULED\tACTIVE\tRETRY")
	}
	for _, q := range r.Queues {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", q.Queue, q.Pending, q.Scheduled, q.Active, q.Retry)
	}
	return tw.Flush()
}

func nextFree(now, next time.Time) string {
	if !next.After(now) {
		return "now"
	}
	return fmt.Sprintf("in %v (%s)", next.Sub(now).Round(time.Millisecond), next.Local().Format("15:04:05.000"))
}
