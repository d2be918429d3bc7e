package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"path"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/cmd/admitq/internal/quotainput"
	"github.com/admitq/admitq/dispatch"
)

// defaultStatusLimit is how many tenants status shows unless told.
const defaultStatusLimit = 50

// statusOptions are the flags that pick and order the tenants status shows.
type statusOptions struct {
	limit int    // 0: every tenant
	sort  string // "usage" or "name"
	match string // Redis glob on tenant names; "" for all
}

func (a *app) newStatusCmd() *cobra.Command {
	var asJSON, watch bool
	interval := time.Second
	o := statusOptions{limit: defaultStatusLimit, sort: "usage"}
	cmd := &cobra.Command{
		Use:   "status [TENANT...] [--limit N] [--sort usage|name] [--match GLOB] [--json] [--watch [--interval D]]",
		Short: "Show tenants' windows and asynq's queues",
		Long: `For each tenant: its quota, the entries in its window, the reservations ahead
of now and the next free slot. Then the concurrency keys' quotas (admitq key),
the first --limit of them, when no TENANT is named. Then each dispatched
queue (one that workers with a gate serve): its tenants (at most 100 with
tasks parked, the next to go in first, and a line that counts the others),
and its concurrency keys with tasks parked or in flight (at most 100), each
against the key's cap, and whether it is paused or held by a downstream
throttle (worker.ThrottledKey). Then asynq's queues: tasks pending, scheduled and
active.

With no TENANT, status lists every tenant that has a quota of its own, and
every tenant on the default quota that has a window in Redis now: one given
a slot within its window, or holding one ahead. A tenant on the default
quota that has been idle for longer than its window has nothing in Redis
(its log expires), so it is not listed, and has nothing to show.

--sort usage (the default) puts the fullest tenants first: the share of the
limit taken in the window and ahead, then the count; --sort name sorts names
naturally (tenant-2 before tenant-10). --limit shows the first N (0 for
all); --match keeps the tenants whose names match a Redis glob (*, ?, [abc],
\ escapes). Named TENANTs are shown as given: --limit, --sort and --match
do not apply.

Reads are batched: quotas and keys a page at a time, windows a pipeline of
hundreds at a time. When some cannot be read, status prints what it read,
marks the rest, and exits 1.

--watch redraws every --interval (a second unless told) until interrupted;
with --json it prints one JSON object per line. In a dispatched queue it
adds each tenant's drain rate, the change of its parked count a second
(smoothed over the last several seconds, net of new tasks), and the time
until none is parked at that rate ("~1m20s"). Tables shorten tenant names longer than 40 characters
with an ellipsis; --json prints them whole.`,
		RunE: func(cmd *cobra.Command, tenants []string) error {
			if err := validateTenants(tenants...); err != nil {
				return err
			}
			if o.limit < 0 {
				return usageErrorf("--limit %d: want 0 (all) or more", o.limit)
			}
			if o.sort != "usage" && o.sort != "name" {
				return usageErrorf("--sort %q: want usage or name", o.sort)
			}
			if len(tenants) > 0 && cmd.Flags().Changed("match") {
				return usageErrorf("--match filters the list of tenants; it does not apply to named tenants")
			}
			if err := checkGlob(o.match); err != nil {
				return err
			}
			if cmd.Flags().Changed("interval") && !watch {
				return usageErrorf("--interval is the period of --watch; give --watch too")
			}
			if interval < minWatchInterval {
				return usageErrorf("--interval %v: want %v or more (each round reads Redis)", interval, minWatchInterval)
			}
			tenants = uniqueInOrder(tenants) // named twice, shown once
			rdb, _, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			s := &statusReader{
				rdb:    rdb,
				opts:   a.gateOptions(),
				quotas: admission.NewRedisQuotas(rdb, a.gateOptions()...),
				insp:   asynq.NewInspectorFromRedisClient(rdb),
				list:   o,
			}
			if !watch {
				r, rerr := s.read(cmd.Context(), tenants)
				if r.Tenants == nil && r.Queues == nil {
					return rerr // nothing read at all
				}
				if asJSON {
					err = writeJSON(a.stdout, r, true)
				} else {
					err = writeStatus(a.stdout, r)
				}
				return cmp.Or(rerr, err)
			}
			return a.watchStatus(cmd.Context(), s, tenants, asJSON, interval)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&watch, "watch", false, "redraw every --interval until interrupted, with parked tasks' drain rates")
	cmd.Flags().DurationVar(&interval, "interval", interval, "period of --watch")
	cmd.Flags().IntVar(&o.limit, "limit", o.limit, "show at most this many tenants; 0 for all")
	cmd.Flags().StringVar(&o.sort, "sort", o.sort, "order of the tenants: usage (fullest first) or name")
	cmd.Flags().StringVar(&o.match, "match", "", "only tenants whose names match this Redis glob, e.g. 'acme-*'")
	return cmd
}

// checkGlob refuses a --match pattern that Redis would not read as its
// author meant: an unclosed or empty [ class, or a trailing \. Redis's
// glob (*, ?, [abc], [^a], [a-z], \ escapes) reads like path.Match's, which
// reports such mistakes where Redis would quietly match nothing.
func checkGlob(pattern string) error {
	if _, err := path.Match(pattern, ""); err != nil {
		return usageErrorf("--match %q: not a valid glob (%v); want *, ?, [abc], [^abc], [a-z] or \\ before a literal", pattern, err)
	}
	return nil
}

// uniqueInOrder returns ss without repeats, each where it first came.
func uniqueInOrder(ss []string) []string {
	seen := make(map[string]bool, len(ss))
	out := ss[:0:0]
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// minWatchInterval is the shortest --interval of status --watch.
const minWatchInterval = 100 * time.Millisecond

// watchStatus redraws the status every interval, with the parked tasks'
// drain rates. A round that could not read everything prints what it read
// and the error, and the watch goes on.
func (a *app) watchStatus(ctx context.Context, s *statusReader, tenants []string, asJSON bool, interval time.Duration) error {
	clear := a.colorful(a.stdout) && !asJSON
	t := time.NewTicker(interval)
	defer t.Stop()
	var m drainMeter
	for first := true; ; first = false {
		r, rerr := s.read(ctx, tenants)
		if ctx.Err() != nil {
			return nil // interrupted: the normal end of a watch
		}
		m.observe(time.Now(), r.Dispatch)
		var err error
		switch {
		case r.Tenants == nil && r.Queues == nil:
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
		if rerr != nil {
			fmt.Fprintf(a.stderr, "admitq: %s\n", strings.TrimPrefix(rerr.Error(), "admitq: "))
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
	// Total is how many tenants the listing found (after --match), of
	// which Tenants holds the first --limit; for named tenants, how many
	// were named.
	Total  int           `json:"total"`
	Queues []queueStatus `json:"queues"`
	// Dispatch are the queues that workers with a gate serve, or did.
	Dispatch []dispatchStatus `json:"dispatch"`
	// KeyQuotas are the stored concurrency keys' quotas, in natural order
	// of their keys, the first --limit of them; KeyQuotasTotal is how many
	// there are. Both are read for a listing only: with named tenants,
	// KeyQuotas is null.
	KeyQuotas      []keyEntry `json:"key_quotas"`
	KeyQuotasTotal int        `json:"key_quotas_total"`
	// Eviction holds each server's maxmemory-policy when one is not
	// noeviction: such a Redis evicts tenants' logs once full, and every
	// bound breaks silently.
	Eviction map[string]string `json:"eviction,omitempty"`
}

type tenantStatus struct {
	Tenant   string     `json:"tenant"`
	Quota    *quotaJSON `json:"quota"`     // null when the tenant has none
	Default  bool       `json:"default"`   // the quota is the default
	InWindow int        `json:"in_window"` // entries in (now-window, now]
	Reserved int        `json:"reserved"`  // reservations after now
	NextFree *time.Time `json:"next_free"` // when a request arriving now would get a slot
	Error    string     `json:"error,omitempty"`

	now time.Time // Redis server time of this tenant's read
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
	opts   []admission.Option
	quotas *admission.RedisQuotas
	insp   *asynq.Inspector
	list   statusOptions
}

// statusQuotas is what status knows of the quotas of the tenants it shows.
type statusQuotas struct {
	static admission.StaticQuotas // the default and tenants' own quotas
	bad    map[string]error       // tenants whose own quota does not decode
	defErr error                  // the default's, when it does not decode
}

// read reads the status of the named tenants, or of the listing. It
// returns what it could read, and an error when some of it failed; a
// report with no tenants and no queues means nothing was read.
func (s *statusReader) read(ctx context.Context, named []string) (statusReport, error) {
	if len(named) > 0 {
		return s.readNamed(ctx, named)
	}
	return s.readListing(ctx)
}

// readNamed reads the named tenants, in the order given.
func (s *statusReader) readNamed(ctx context.Context, named []string) (statusReport, error) {
	sq, err := s.namedQuotas(ctx, named)
	if err != nil {
		return statusReport{}, err
	}
	read, idle, bad := sq.split(named, nil)
	gate := admission.New(s.rdb, sq.static, s.opts...)
	defer gate.Close()
	rows := s.collect(ctx, sq, gate.UsageBatch(ctx, read), idle, bad)
	r := statusReport{Time: rows.time, Total: len(named), Tenants: rows.inOrder(named)}
	return s.finish(ctx, r, rows, len(named), false)
}

// readListing reads the tenants the listing finds: matched by --match,
// ordered by --sort, the first --limit of them.
func (s *statusReader) readListing(ctx context.Context) (statusReport, error) {
	names, active, sq, err := s.listing(ctx)
	if err != nil {
		return statusReport{}, err
	}
	limit, shown := s.list.limit, names
	if s.list.sort == "name" && limit > 0 && len(names) > limit {
		shown = names[:limit] // names are in natural order already
	}
	read, idle, bad := sq.split(shown, active)
	gate := admission.New(s.rdb, sq.static, s.opts...)
	defer gate.Close()
	var rows tenantRows
	r := statusReport{Total: len(names)}
	if s.list.sort == "usage" {
		rows = s.collect(ctx, sq, gate.UsageTop(ctx, read, limit), idle, bad)
		r.Tenants = rows.byUsage(idle, limit)
	} else {
		rows = s.collect(ctx, sq, gate.UsageBatch(ctx, read), idle, bad)
		r.Tenants = rows.inOrder(shown)
	}
	r.Time = rows.time
	return s.finish(ctx, r, rows, len(read)+len(idle)+len(bad), true)
}

// split sorts tenants into those to read, those with nothing in Redis
// (idle: not in active; a nil active holds every tenant), whose windows are
// empty and need no read, and those whose own quota does not decode.
func (sq statusQuotas) split(tenants []string, active map[string]bool) (read, idle, bad []string) {
	for _, t := range tenants {
		switch {
		case sq.bad[t] != nil:
			bad = append(bad, t)
		case active == nil || active[t]:
			read = append(read, t)
		default:
			idle = append(idle, t)
		}
	}
	return read, idle, bad
}

// tenantRows are the rows of the tenants status read.
type tenantRows struct {
	time   time.Time               // Redis server time
	ok     []tenantStatus          // read from Redis, in the order read
	rows   map[string]tenantStatus // ok and idle rows by tenant
	failed []tenantStatus          // rows that could not be read
	errs   []error                 // why, in the same order
}

// collect turns usages into rows, and adds the idle tenants' (empty windows
// at the time of the first read) and the undecodable ones'.
func (s *statusReader) collect(ctx context.Context, sq statusQuotas, results []admission.UsageResult, idle, bad []string) tenantRows {
	tr := tenantRows{rows: map[string]tenantStatus{}}
	for _, u := range results {
		ts, err := sq.row(u)
		if err != nil {
			tr.failed, tr.errs = append(tr.failed, ts), append(tr.errs, err)
			continue
		}
		if tr.time.IsZero() && ts.NextFree != nil {
			tr.time = u.Usage.Now
		}
		tr.ok, tr.rows[ts.Tenant] = append(tr.ok, ts), ts
	}
	if tr.time.IsZero() {
		if now, err := s.rdb.Time(ctx).Result(); err == nil {
			tr.time = now
		}
	}
	for _, t := range idle {
		q, err := sq.static.Quota(ctx, t)
		ts, err := sq.row(admission.UsageResult{Usage: admission.Usage{Tenant: t, Quota: q, Now: tr.time, NextFree: tr.time}, Err: err})
		if err != nil {
			tr.failed, tr.errs = append(tr.failed, ts), append(tr.errs, err)
			continue
		}
		tr.rows[t] = ts
	}
	for _, t := range bad {
		tr.failed, tr.errs = append(tr.failed, tenantStatus{Tenant: t, Error: sq.bad[t].Error()}), append(tr.errs, sq.bad[t])
	}
	return tr
}

// byUsage is the rows in UsageTop's order, then the idle tenants, none of
// whom holds anything, by name, then the failed ones; the first limit of
// them (0: all).
func (tr tenantRows) byUsage(idle []string, limit int) []tenantStatus {
	out := slices.Clone(tr.ok)
	for _, t := range idle {
		if ts, found := tr.rows[t]; found {
			out = append(out, ts)
		}
	}
	out = append(out, tr.failed...)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	if out == nil {
		out = []tenantStatus{}
	}
	return out
}

// inOrder is the rows of names, failed ones included, in names' order.
func (tr tenantRows) inOrder(names []string) []tenantStatus {
	byName := map[string]tenantStatus{}
	for _, ts := range tr.failed {
		byName[ts.Tenant] = ts
	}
	maps.Copy(byName, tr.rows)
	out := make([]tenantStatus, 0, len(names))
	for _, t := range names {
		out = append(out, byName[t])
	}
	return out
}

// finish adds asynq's queues, the dispatched queues and, for a listing,
// the key quotas to r, and joins what failed: the rows that could not be
// read (of counted tenants), the queues and the key quotas.
func (s *statusReader) finish(ctx context.Context, r statusReport, tr tenantRows, counted int, listing bool) (statusReport, error) {
	var errAll []error
	if len(tr.errs) > 0 {
		errAll = append(errAll, fmt.Errorf("%d of %d tenants could not be read; the first: %w", len(tr.errs), counted, tr.errs[0]))
	}
	queues, err := s.queues()
	r.Queues = append([]queueStatus{}, queues...)
	if err != nil {
		errAll = append(errAll, err)
	}
	var keyQuotas map[string]admission.Quota
	if listing {
		// Named tenants are read without scanning a hash: no key quotas.
		keyQuotas, err = s.quotas.ListKeys(ctx)
		if err != nil {
			errAll = append(errAll, fmt.Errorf("key quotas: %w", err))
		}
		r.KeyQuotas, r.KeyQuotasTotal = s.shownKeyQuotas(keyQuotas)
	}
	r.Dispatch, err = s.readDispatch(ctx, keyQuotas) // depth.go
	if err != nil {
		errAll = append(errAll, err)
	}
	if policies, err := admission.MaxmemoryPolicy(ctx, s.rdb); err == nil {
		for addr, p := range policies {
			if p != admission.NoEviction {
				if r.Eviction == nil {
					r.Eviction = map[string]string{}
				}
				r.Eviction[addr] = p
			}
		}
	}
	return r, errors.Join(errAll...)
}

// row turns a tenant's usage into its row, with the error that kept it
// from being read, if any. Having no quota at all is not an error; being
// on a default that does not decode is.
func (sq statusQuotas) row(u admission.UsageResult) (tenantStatus, error) {
	ts := tenantStatus{Tenant: u.Usage.Tenant}
	err := u.Err
	switch {
	case errors.Is(err, admission.ErrNoQuota) && sq.defErr != nil:
		err = sq.defErr
	case errors.Is(err, admission.ErrNoQuota):
		return ts, nil
	}
	if err != nil {
		ts.Error = err.Error()
		return ts, err
	}
	q := toQuotaJSON(u.Usage.Quota)
	_, own := sq.static.Tenants[ts.Tenant]
	ts.Quota, ts.Default = &q, !own
	ts.InWindow, ts.Reserved = u.Usage.InWindow, u.Usage.Reserved
	next := u.Usage.NextFree
	ts.NextFree, ts.now = &next, u.Usage.Now
	return ts, nil
}

// namedQuotas reads the quotas of named tenants, and the default.
func (s *statusReader) namedQuotas(ctx context.Context, named []string) (statusQuotas, error) {
	sq := statusQuotas{static: admission.StaticQuotas{Tenants: map[string]admission.Quota{}}, bad: map[string]error{}}
	if err := s.readDefault(ctx, &sq); err != nil {
		return sq, err
	}
	res, err := s.quotas.GetBatch(ctx, named)
	if err != nil {
		return sq, err
	}
	for i, r := range res {
		switch {
		case r.Err == nil:
			sq.static.Tenants[named[i]] = r.Quota
		case !errors.Is(r.Err, admission.ErrNoQuota):
			sq.bad[named[i]] = r.Err
		}
	}
	return sq, nil
}

func (s *statusReader) readDefault(ctx context.Context, sq *statusQuotas) error {
	def, err := s.quotas.GetDefault(ctx)
	switch {
	case err == nil:
		sq.static.Default = &def
	case errors.Is(err, admission.ErrInvalidQuota):
		sq.defErr = err
	case !errors.Is(err, admission.ErrNoQuota):
		return err
	}
	return nil
}

// listing finds the tenants to list, in natural order: those with a quota
// of their own and those with a window in Redis, which it returns as
// active. The quota hash and the keys are scanned at the same time.
func (s *statusReader) listing(ctx context.Context) (names []string, active map[string]bool, sq statusQuotas, err error) {
	sq = statusQuotas{static: admission.StaticQuotas{Tenants: map[string]admission.Quota{}}, bad: map[string]error{}}
	active = map[string]bool{}
	// A gate only to scan the keys of the prefix: no quota is looked up.
	scanner := admission.New(s.rdb, admission.StaticQuotas{}, s.opts...)
	defer scanner.Close()
	var qerr, kerr error
	var wg sync.WaitGroup
	wg.Go(func() {
		if qerr = s.readDefault(ctx, &sq); qerr != nil {
			return
		}
		qerr = s.quotas.Scan(ctx, s.list.match, func(tenant string, q admission.Quota, err error) error {
			if err != nil {
				sq.bad[tenant] = err
			} else {
				sq.static.Tenants[tenant] = q
			}
			return nil
		})
	})
	wg.Go(func() {
		kerr = scanner.ScanTenants(ctx, s.list.match, func(tenant string) error {
			active[tenant] = true
			return nil
		})
	})
	wg.Wait()
	if err := cmp.Or(qerr, kerr); err != nil {
		return nil, nil, sq, err
	}
	names = make([]string, 0, len(sq.static.Tenants)+len(sq.bad)+len(active))
	for t := range sq.static.Tenants {
		names = append(names, t)
	}
	for t := range sq.bad {
		names = append(names, t)
	}
	for t := range active {
		if _, own := sq.static.Tenants[t]; !own && sq.bad[t] == nil {
			names = append(names, t)
		}
	}
	sortNatural(names)
	return names, active, sq, nil
}

// queues reads asynq's queues.
func (s *statusReader) queues() ([]queueStatus, error) {
	queues, err := s.insp.Queues()
	if err != nil {
		return nil, fmt.Errorf("asynq queues: %w", err)
	}
	slices.Sort(queues)
	var out []queueStatus
	for _, q := range queues {
		info, err := s.insp.GetQueueInfo(q)
		if err != nil {
			return out, fmt.Errorf("asynq queue %q: %w", q, err)
		}
		out = append(out, queueStatus{
			Queue: q, Pending: info.Pending, Scheduled: info.Scheduled, Active: info.Active, Retry: info.Retry,
		})
	}
	return out, nil
}

func writeStatus(w io.Writer, r statusReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(r.Tenants) == 0 {
		fmt.Fprintln(tw, "no tenant has a quota of its own or a window in Redis")
	} else {
		fmt.Fprintln(tw, "TENANT\tQUOTA\tIN WINDOW\tAHEAD\tNEXT FREE")
	}
	for _, t := range r.Tenants {
		name := tableTenant(t.Tenant)
		switch {
		case t.Error != "":
			fmt.Fprintf(tw, "%s\terror: %s\t\t\t\n", name, t.Error)
			continue
		case t.Quota == nil:
			fmt.Fprintf(tw, "%s\t%s\t\t\t\n", name, "no quota")
			continue
		}
		q := t.Quota.String()
		if t.Default {
			q += " (default)"
		}
		now := r.Time
		if !t.now.IsZero() {
			now = t.now // reads of many tenants take a while: each against its own time
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%s\t%d\t%s\n", name, q, t.InWindow, quotainput.FormatLimit(t.Quota.Limit), t.Reserved, nextFree(now, *t.NextFree))
	}
	if more := r.Total - len(r.Tenants); more > 0 {
		fmt.Fprintf(tw, "… and %d more tenants (--limit 0 shows them all)\n", more)
	}
	fmt.Fprintln(tw)
	if len(r.KeyQuotas) > 0 {
		writeKeyRows(tw, r.KeyQuotas)
		if more := r.KeyQuotasTotal - len(r.KeyQuotas); more > 0 {
			fmt.Fprintf(tw, "… and %d more key quotas (admitq key list shows them all)\n", more)
		}
		fmt.Fprintln(tw)
	}
	writeDispatch(tw, r)
	for _, addr := range slices.Sorted(maps.Keys(r.Eviction)) {
		fmt.Fprintf(tw, "warning: %s has maxmemory-policy %s: once full it evicts tenants' logs and every bound breaks silently; set it to noeviction\n", addr, r.Eviction[addr])
	}
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

// shownKeyQuotas are the stored key quotas status shows, in natural order
// of their keys, the first --limit of them (0: all), and how many there
// are.
func (s *statusReader) shownKeyQuotas(all map[string]admission.Quota) ([]keyEntry, int) {
	keys := slices.Collect(maps.Keys(all))
	sortNatural(keys)
	if s.list.limit > 0 && len(keys) > s.list.limit {
		keys = keys[:s.list.limit]
	}
	out := make([]keyEntry, 0, len(keys))
	for _, k := range keys {
		out = append(out, toKeyEntry(k, all[k]))
	}
	return out, len(all)
}

// dispatchKey is a concurrency key in a dispatched queue, as status shows
// it: its tasks parked and in flight, against its cap, and what holds them.
type dispatchKey struct {
	Key    string `json:"key"`
	Parked int    `json:"parked"` // tasks carrying the key that wait their turn
	// InFlight is how many tasks carrying the key the dispatcher let in
	// that asynq still holds. MaxInFlight is the cap in the key's quota
	// now (0: none); AtCap and OverCap are as a tenant's.
	InFlight    int  `json:"in_flight"`
	MaxInFlight int  `json:"max_in_flight"`
	AtCap       bool `json:"at_cap"`
	OverCap     bool `json:"over_cap"`
	// Paused: the key's quota holds its tasks. Held: a downstream
	// service's throttle (worker.ThrottledKey) holds them until HeldUntil.
	Paused    bool       `json:"paused"`
	Held      bool       `json:"held"`
	HeldUntil *time.Time `json:"held_until,omitempty"`
	// HeldFor is how long the throttle still holds them, in seconds, at
	// the time of the reading.
	HeldFor *float64 `json:"held_for_s,omitempty"`
}

// toDispatchKeys turns a queue's key stats into status's rows: the cap and
// the pause as the key's stored quota has them now, when it is in
// quotas (a listing reads them all), else as the dispatcher applies them.
func toDispatchKeys(qs dispatch.QueueStats, quotas map[string]admission.Quota) []dispatchKey {
	out := make([]dispatchKey, 0, len(qs.Keys))
	for _, k := range qs.Keys {
		dk := dispatchKey{Key: k.Key, Parked: k.Waiting, InFlight: k.InFlight, MaxInFlight: k.Cap, Paused: k.Paused, Held: k.Held}
		if q, ok := quotas[k.Key]; ok {
			dk.MaxInFlight, dk.Paused = q.MaxInFlight, q.Paused
		}
		dk.AtCap = dk.MaxInFlight > 0 && dk.InFlight >= dk.MaxInFlight
		dk.OverCap = dk.MaxInFlight > 0 && dk.InFlight > dk.MaxInFlight
		if k.Held && !k.HeldUntil.IsZero() {
			until := k.HeldUntil
			dk.HeldUntil = &until
			if d := until.Sub(qs.Now).Seconds(); d > 0 {
				dk.HeldFor = &d
			}
		}
		out = append(out, dk)
	}
	return out
}

// keyHoldText says what holds a key's tasks: "paused", "held 2.5s (until
// 15:04:05.000)", both, or "-".
func keyHoldText(k dispatchKey) string {
	var parts []string
	if k.Paused {
		parts = append(parts, "paused")
	}
	if k.Held {
		held := "held"
		if k.HeldFor != nil {
			held += " " + (time.Duration(*k.HeldFor * float64(time.Second))).Round(100*time.Millisecond).String()
		}
		if k.HeldUntil != nil {
			held += " (until " + k.HeldUntil.Local().Format("15:04:05.000") + ")"
		}
		parts = append(parts, held)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// writeDispatchKeys writes a dispatched queue's concurrency keys: their
// tasks parked, in flight against the key's cap, and what holds them.
func writeDispatchKeys(w io.Writer, q dispatchStatus) {
	if len(q.Keys) == 0 {
		return
	}
	fmt.Fprintln(w, "KEY\tPARKED\tIN FLIGHT\tHELD")
	for _, k := range q.Keys {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", tableTenant(k.Key), k.Parked, flightOfCap(k.InFlight, k.MaxInFlight), keyHoldText(k))
	}
	if len(q.Keys) >= dispatch.StatsKeys {
		fmt.Fprintf(w, "(status shows at most %d keys a queue)\n", dispatch.StatsKeys)
	}
}

func nextFree(now, next time.Time) string {
	if !next.After(now) {
		return "now"
	}
	return fmt.Sprintf("in %v (%s)", next.Sub(now).Round(time.Millisecond), next.Local().Format("15:04:05.000"))
}

// drainSmoothing is the time constant of the drain rates' moving average:
// a rate reflects mostly the last few of these.
const drainSmoothing = 5 * time.Second

// drainMeter follows each dispatched tenant's parked count across the
// rounds of a watch, for its drain rate. The zero value is ready to use.
type drainMeter struct {
	last map[drainKey]drainPoint
}

type drainKey struct{ queue, tenant string }

// drainPoint is a tenant's last round: when, how many were parked, and
// the smoothed rate (valid once rated).
type drainPoint struct {
	at     time.Time
	parked int
	rate   float64
	rated  bool
}

// observe folds a round read at now into the meter and sets the drain rate
// and estimate of each tenant in qs seen in an earlier round. The rate is
// an exponential moving average, weighted by the time between rounds, of
// the parked count's fall a second. A tenant missing from a round starts
// afresh when it comes back.
func (m *drainMeter) observe(now time.Time, qs []dispatchStatus) {
	next := make(map[drainKey]drainPoint)
	for qi := range qs {
		for ti := range qs[qi].Tenants {
			t := &qs[qi].Tenants[ti]
			k := drainKey{qs[qi].Queue, t.Tenant}
			p := drainPoint{at: now, parked: t.Parked}
			prev, seen := m.last[k]
			if dt := now.Sub(prev.at).Seconds(); seen && dt > 0 {
				inst := float64(prev.parked-t.Parked) / dt
				p.rate, p.rated = inst, true
				if prev.rated {
					alpha := 1 - math.Exp(-dt/drainSmoothing.Seconds())
					p.rate = prev.rate + alpha*(inst-prev.rate)
				}
			} else if seen {
				p = prev // a second reading at the same instant adds nothing
			}
			next[k] = p
			if p.rated {
				rate := p.rate
				t.DrainRate = &rate
				if rate > 0 && t.Parked > 0 {
					eta := float64(t.Parked) / rate
					t.DrainETA = &eta
				}
			}
		}
	}
	m.last = next
}

// drainRateText is a tenant's drain rate for the table: "2.5/s", "-1.0/s"
// while its parked tasks grow.
func drainRateText(t dispatchTenant) string {
	if t.DrainRate == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f/s", *t.DrainRate)
}

// drainETAText is when a tenant's parked tasks will be gone at its drain
// rate, roughly: "~1m20s"; "none parked", or "not draining".
func drainETAText(t dispatchTenant) string {
	switch {
	case t.Parked == 0:
		return "none parked"
	case t.DrainETA == nil:
		return "not draining"
	}
	return "~" + roughDuration(time.Duration(*t.DrainETA*float64(time.Second)))
}

// roughDuration rounds d for an estimate: to the second under a minute, to
// 10 s under 10 minutes, to the minute under a day, else to the hour; and
// drops trailing zero units ("1h5m", not "1h5m0s").
func roughDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return "<1s"
	case d < time.Minute:
		d = d.Round(time.Second)
	case d < 10*time.Minute:
		d = d.Round(10 * time.Second)
	case d < 24*time.Hour:
		d = d.Round(time.Minute)
	default:
		d = d.Round(time.Hour)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
