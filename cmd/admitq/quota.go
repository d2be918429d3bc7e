package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/cmd/admitq/internal/quotainput"
)

func (a *app) newQuotaCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Set, update, pause, show and delete per-tenant quotas",
		Long: `Quotas live in the Redis hash <prefix>:quotas. Running producers pick up a
change within a second. A tenant without a quota of its own gets the default.`,
		// Without a RunE, cobra would print the help for a missing or
		// misspelt subcommand and exit 0.
		Args: cobra.ArbitraryArgs,
		RunE: needSubcommand,
	}
	cmd.AddCommand(
		a.newQuotaSetCmd(),
		a.newQuotaUpdateCmd(),
		a.newQuotaPauseCmd(true),
		a.newQuotaPauseCmd(false),
		a.newQuotaSetDefaultCmd(),
		a.newQuotaGetCmd(),
		a.newQuotaListCmd(),
		a.newQuotaDeleteCmd(),
		a.newQuotaDeleteDefaultCmd(),
	)
	return cmd
}

// quotaFlags are --limit, --window, --max-delay, --mode, --max-in-flight,
// --max-parked and --weight.
type quotaFlags struct {
	limit       string // a number, or none
	window      time.Duration
	maxDelay    time.Duration
	mode        string
	maxInFlight int
	maxParked   int
	weight      float64
}

// quotaFlagNames are the quota flags, in the order messages name them.
var quotaFlagNames = []string{"limit", "window", "max-delay", "mode", "max-in-flight", "max-parked", "weight"}

func (f *quotaFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.limit, "limit", "", "tasks admitted in any window, or none for no rate limit (the quota then only caps, weighs or pauses)")
	fs.DurationVar(&f.window, "window", 0, "length of the sliding window, e.g. 1s or 1m (needed with a numeric --limit)")
	fs.DurationVar(&f.maxDelay, "max-delay", 0, "how far ahead a task over the limit may be deferred; 0 rejects it at once")
	fs.StringVar(&f.mode, "mode", admission.Log.String(), "how the window is kept: log (exact), or counter for quotas too large to log")
	fs.IntVar(&f.maxInFlight, "max-in-flight", 0, "tasks of the tenant pending or running in the worker queues at once; the rest are parked in order (0: no cap)")
	fs.IntVar(&f.maxParked, "max-parked", 0, fmt.Sprintf("parked tasks the tenant may have before new ones are rejected (0: %d)", admission.DefaultMaxParked))
	fs.Float64Var(&f.weight, "weight", 0, "the tenant's share of a fair queue's worker time against other tenants waiting there, e.g. 3 for three times a weight-1 tenant's (0: 1)")
}

// given returns the quota flags on the command line.
func (f *quotaFlags) given(cmd *cobra.Command) []string {
	var out []string
	for _, name := range quotaFlagNames {
		if cmd.Flags().Changed(name) {
			out = append(out, name)
		}
	}
	return out
}

// quota is the quota set and set-default write: the flags given, the
// others at their defaults. --limit is required, and --window with a
// numeric limit. It checks the flags, naming them, before anything
// touches Redis, and warns on stderr of a valid quota that will not do
// what it seems to.
func (f *quotaFlags) quota(cmd *cobra.Command, stderr io.Writer) (admission.Quota, error) {
	if !cmd.Flags().Changed("limit") {
		return admission.Quota{}, usageErrorf("--limit is required: a number, or none for no rate limit")
	}
	if !strings.EqualFold(strings.TrimSpace(f.limit), quotainput.None) && !cmd.Flags().Changed("window") {
		return admission.Quota{}, usageErrorf("--window is required with --limit %s", f.limit)
	}
	return f.apply(cmd, admission.Quota{}, stderr)
}

// check checks the flags given on their own, before anything touches
// Redis, as quota update does before it reads the quota they change.
func (f *quotaFlags) check(cmd *cobra.Command) error {
	// A base with a rate limit, which any one flag can change into a
	// valid quota: whether --limit needs --window too depends on the
	// stored quota, which apply checks against it.
	_, err := f.apply(cmd, admission.Quota{Limit: 1, Window: time.Hour}, io.Discard)
	return err
}

// apply returns base with the field of every quota flag given replaced by
// the flag's value, checked as a whole (quotainput.CheckQuota); the
// errors are usage errors that name the flag. It warns on stderr as quota
// does.
func (f *quotaFlags) apply(cmd *cobra.Command, base admission.Quota, stderr io.Writer) (admission.Quota, error) {
	q := base
	changed := cmd.Flags().Changed
	if changed("limit") {
		n, fe := quotainput.ParseLimit(f.limit)
		if fe != nil {
			return admission.Quota{}, usageError(fe)
		}
		if n != admission.NoLimit && q.Unlimited() && !changed("window") {
			return admission.Quota{}, usageErrorf("--limit %s: the quota has no rate limit, so no window to count in: give --window too", f.limit)
		}
		q.Limit = n
	}
	if changed("window") {
		q.Window = f.window
	}
	if changed("max-delay") {
		q.MaxDelay = f.maxDelay
	}
	if changed("mode") {
		m, fe := quotainput.ParseMode(f.mode)
		if fe != nil {
			return admission.Quota{}, usageError(fe)
		}
		q.Mode = m
	}
	if changed("max-in-flight") {
		q.MaxInFlight = f.maxInFlight
	}
	if changed("max-parked") {
		q.MaxParked = f.maxParked
	}
	if changed("weight") {
		q.Weight = f.weight
	}
	if q.Unlimited() {
		for _, name := range []string{"window", "max-delay", "mode"} {
			if changed(name) {
				return admission.Quota{}, usageErrorf("--%s: the quota has no rate limit (--limit none), which --%s would shape: give --limit N to set one", name, name)
			}
		}
	}
	// quotainput gives the dashboard's form the same checks and messages.
	if err := quotainput.CheckQuota(q); err != nil {
		return admission.Quota{}, usageError(err)
	}
	if w := quotainput.Warning(q); w != "" {
		fmt.Fprintf(stderr, "admitq: warning: %s\n", w)
	}
	return q, nil
}

// resets lists the fields that set's quota q leaves at their defaults,
// because no flag gave them, where old had them set: "max in flight 4 →
// none".
func resets(cmd *cobra.Command, old, q admission.Quota) []string {
	var out []string
	note := func(flag string, had, now any, differ bool) {
		if differ && !cmd.Flags().Changed(flag) {
			out = append(out, fmt.Sprintf("%s %v → %v", strings.ReplaceAll(flag, "-", " "), had, now))
		}
	}
	note("max-delay", old.MaxDelay, q.MaxDelay, old.MaxDelay != q.MaxDelay)
	note("mode", old.Mode, q.Mode, old.Mode != q.Mode)
	note("max-in-flight", old.MaxInFlight, "none", old.MaxInFlight > 0 && q.MaxInFlight == 0)
	note("max-parked", old.MaxParked, fmt.Sprintf("%d (the default)", admission.DefaultMaxParked), old.MaxParked > 0 && q.MaxParked == 0)
	note("weight", strconv.FormatFloat(old.EffectiveWeight(), 'g', -1, 64), "1", old.EffectiveWeight() != q.EffectiveWeight())
	return out
}

// noteResets tells on stderr what resets finds, and how to change only
// some fields instead.
// update names the command that changes only some fields, or is "".
func (a *app) noteResets(cmd *cobra.Command, name, update string, old, q admission.Quota) {
	r := resets(cmd, old, q)
	if len(r) == 0 {
		return
	}
	hint := ""
	if update != "" {
		hint = " (" + update + " changes only the flags given)"
	}
	fmt.Fprintf(a.stderr, "admitq: note: %s: set resets what its flags leave out: %s%s\n", name, strings.Join(r, ", "), hint)
}

func (a *app) newQuotaSetCmd() *cobra.Command {
	var f quotaFlags
	cmd := &cobra.Command{
		Use:   "set TENANT --limit N|none [--window D] [--max-delay D] [--mode log|counter] [--max-in-flight N] [--max-parked M] [--weight W]",
		Short: "Set a tenant's quota",
		Long: `Sets a tenant's whole quota: a field whose flag is not given gets its default,
and set names on stderr each field it so resets that the tenant had set
(quota update changes only the flags given). --limit none is no rate limit:
the quota then only caps, weighs or pauses, and needs no --window. A paused
tenant stays paused (quota resume resumes it).`,
		Example: `  admitq quota set acme --limit 100 --window 1m --max-delay 30s
  admitq quota set bulk --limit 1000000 --window 1m --mode counter
  admitq quota set noisy --limit 100 --window 1s --max-in-flight 4 --max-parked 50000
  admitq quota set gold --limit 100 --window 1s --weight 3
  admitq quota set fair-only --limit none --weight 2`,
		Args: oneTenant,
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant := args[0]
			if err := validateTenants(tenant); err != nil {
				return err
			}
			q, err := f.quota(cmd, a.stderr)
			if err != nil {
				return err
			}
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				old, had, err := ownQuota(quotas.Get(cmd.Context(), tenant))
				if err != nil {
					return err
				}
				q.Paused = old.Paused
				if err := quotas.Set(cmd.Context(), tenant, q); err != nil {
					return inputError(err)
				}
				fmt.Fprintf(a.stdout, "%s: %s\n", tenant, q)
				if had {
					a.noteResets(cmd, tenant, "quota update "+tenant, old, q)
				}
				return nil
			})
		},
	}
	f.register(cmd)
	return cmd
}

// ownQuota reads the answer of a Get: the quota and true, or ok false
// when there is none; a stored quota that does not decode counts as none,
// since writing over it is how to mend it.
func ownQuota(q admission.Quota, err error) (admission.Quota, bool, error) {
	switch {
	case err == nil:
		return q, true, nil
	case errors.Is(err, admission.ErrNoQuota), errors.Is(err, admission.ErrInvalidQuota):
		return admission.Quota{}, false, nil
	}
	return admission.Quota{}, false, err
}

func (a *app) newQuotaUpdateCmd() *cobra.Command {
	var f quotaFlags
	cmd := &cobra.Command{
		Use:   "update TENANT [--limit N|none] [--window D] [--max-delay D] [--mode log|counter] [--max-in-flight N] [--max-parked M] [--weight W]",
		Short: "Change only the given fields of a tenant's quota",
		Long: `Reads the tenant's own quota, changes the fields whose flags are given, and
writes it back: the others keep their values. A tenant without a quota of its
own is an error (exit 1): quota set gives it one. Bad flags, or a quota they
would make invalid, are a usage error (exit 2), and nothing is written. Going
from --limit none to a number needs --window too.

The read and the write are two steps: of two updates of one tenant at the same
moment, the later write wins whole.`,
		Example: `  admitq quota update acme --max-in-flight 8
  admitq quota update acme --limit none
  admitq quota update acme --limit 200 --window 1m`,
		Args: oneTenant,
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant := args[0]
			if err := validateTenants(tenant); err != nil {
				return err
			}
			if len(f.given(cmd)) == 0 {
				return usageErrorf("quota update %s: give a field to change: --%s", tenant, strings.Join(quotaFlagNames, ", --"))
			}
			if err := f.check(cmd); err != nil {
				return err
			}
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				old, err := quotas.Get(cmd.Context(), tenant)
				if errors.Is(err, admission.ErrNoQuota) {
					return fmt.Errorf("tenant %q has no quota of its own to update; quota set %s gives it one; nothing written", tenant, tenant)
				}
				if err != nil {
					return err
				}
				q, err := f.apply(cmd, old, a.stderr)
				if err != nil {
					return err
				}
				if q == old {
					fmt.Fprintf(a.stdout, "%s: %s (unchanged)\n", tenant, q)
					return nil
				}
				if err := quotas.Set(cmd.Context(), tenant, q); err != nil {
					return inputError(err)
				}
				fmt.Fprintf(a.stdout, "%s: %s (was %s)\n", tenant, q, old)
				return nil
			})
		},
	}
	f.register(cmd)
	return cmd
}

// newQuotaPauseCmd is quota pause (pause true) or quota resume.
func (a *app) newQuotaPauseCmd(pause bool) *cobra.Command {
	use, short, long := "resume TENANT", "Let a paused tenant's tasks go into the worker queues again",
		`Clears the tenant's Paused: its waiting tasks go into the dispatched queues
again, in order. A tenant that is not paused is left as it is (exit 0); one
without a quota of its own is an error (exit 1).`
	if pause {
		use, short, long = "pause TENANT", "Hold a tenant's tasks out of the worker queues until resume",
			`Sets the tenant's Paused: none of its tasks goes into a dispatched queue (one
served by a worker with a gate) until quota resume; running tasks finish, and
new ones wait, parked, in order. Producers and workers see it within about a
second. A tenant already paused is left as it is (exit 0).

A tenant without a quota of its own is given a copy of the default quota,
paused (quota delete TENANT later returns it to the default); with no default
either, it is refused already, and pause is an error (exit 1).`
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  oneTenant,
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant := args[0]
			if err := validateTenants(tenant); err != nil {
				return err
			}
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				ctx := cmd.Context()
				q, err := quotas.Get(ctx, tenant)
				fromDefault := false
				switch {
				case errors.Is(err, admission.ErrNoQuota) && !pause:
					return fmt.Errorf("tenant %q has no quota of its own, so it is not paused; nothing changed (tasks it parked while paused, before its quota was deleted, wait until it has a quota again: quota set, or quota set-default)", tenant)
				case errors.Is(err, admission.ErrNoQuota):
					d, derr := quotas.GetDefault(ctx)
					if errors.Is(derr, admission.ErrNoQuota) {
						return fmt.Errorf("tenant %q has no quota, and there is no default: it is refused already; nothing paused", tenant)
					}
					if derr != nil {
						return derr
					}
					q, fromDefault = d, true
				case err != nil:
					return err
				}
				if q.Paused == pause && !fromDefault {
					state := "not paused"
					if pause {
						state = "already paused"
					}
					fmt.Fprintf(a.stdout, "%s: %s: %s\n", tenant, state, q)
					return nil
				}
				q.Paused = pause
				if err := quotas.Set(ctx, tenant, q); err != nil {
					return inputError(err)
				}
				state := "resumed"
				if pause {
					state = "paused"
				}
				fmt.Fprintf(a.stdout, "%s: %s: %s\n", tenant, state, q)
				if fromDefault {
					fmt.Fprintf(a.stderr, "admitq: note: %s had no quota of its own: it now has a copy of the default, paused; quota delete %s returns it to the default\n", tenant, tenant)
				}
				return nil
			})
		},
	}
}

func (a *app) newQuotaSetDefaultCmd() *cobra.Command {
	var f quotaFlags
	cmd := &cobra.Command{
		Use:   "set-default --limit N|none [--window D] [--max-delay D] [--mode log|counter] [--max-in-flight N] [--max-parked M] [--weight W]",
		Short: "Set the quota of tenants that have none of their own",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := f.quota(cmd, a.stderr)
			if err != nil {
				return err
			}
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				old, had, err := ownQuota(quotas.GetDefault(cmd.Context()))
				if err != nil {
					return err
				}
				q.Paused = old.Paused
				if err := quotas.SetDefault(cmd.Context(), q); err != nil {
					return inputError(err)
				}
				fmt.Fprintf(a.stdout, "default: %s\n", q)
				if had {
					a.noteResets(cmd, "default", "", old, q)
				}
				return nil
			})
		},
	}
	f.register(cmd)
	return cmd
}

func (a *app) newQuotaGetCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get TENANT",
		Short: "Show a tenant's own quota",
		Args:  oneTenant,
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant := args[0]
			if err := validateTenants(tenant); err != nil {
				return err
			}
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				q, err := quotas.Get(cmd.Context(), tenant)
				if errors.Is(err, admission.ErrNoQuota) {
					if d, derr := quotas.GetDefault(cmd.Context()); derr == nil {
						return fmt.Errorf("tenant %q has no quota of its own; the default %s applies", tenant, d)
					}
					return fmt.Errorf("tenant %q has no quota, and there is no default", tenant)
				}
				if err != nil {
					return readError(err)
				}
				if asJSON {
					return writeJSON(a.stdout, toQuotaEntry(tenant, q), true)
				}
				fmt.Fprintf(a.stdout, "%s: %s\n", tenant, q)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) newQuotaListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List every quota, the default first",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				all, err := quotas.List(cmd.Context())
				if err != nil {
					return err
				}
				l := toQuotaList(all)
				if asJSON {
					return writeJSON(a.stdout, l, true)
				}
				return writeQuotaTable(a.stdout, l)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) newQuotaDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete TENANT",
		Short: "Delete a tenant's own quota; the default then applies",
		Long: `Deletes a tenant's own quota; the default then applies. A tenant that has
no quota of its own is an error (exit 1), and nothing changes.`,
		Args: oneTenant,
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant := args[0]
			if err := validateTenants(tenant); err != nil {
				return err
			}
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				ctx := cmd.Context()
				_, err := quotas.Get(ctx, tenant)
				return deleteQuota(a.stdout, tenant, fmt.Sprintf("tenant %q has no quota of its own", tenant), err,
					func() error { return quotas.Delete(ctx, tenant) })
			})
		},
	}
}

func (a *app) newQuotaDeleteDefaultCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete-default",
		Short: "Delete the default quota; tenants without their own are then refused",
		Long: `Deletes the default quota; tenants without a quota of their own are then
refused. When there is no default, that is an error (exit 1), as quota delete
of a tenant without a quota is, and nothing changes.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				ctx := cmd.Context()
				_, err := quotas.GetDefault(ctx)
				return deleteQuota(a.stdout, "default", "there is no default quota", err,
					func() error { return quotas.DeleteDefault(ctx) })
			})
		},
	}
}

// deleteQuota runs del after a Get of the entry that returned getErr, and
// reports it: a missing entry is an error, named by missing, and nothing
// is deleted; an entry that does not decode is deleted all the same, since
// deleting it is how to be rid of it. A quota set between the Get and del
// is deleted and reported deleted, which is what the caller asked.
func deleteQuota(w io.Writer, name, missing string, getErr error, del func() error) error {
	switch {
	case errors.Is(getErr, admission.ErrNoQuota):
		return fmt.Errorf("%s; nothing deleted", missing)
	case getErr != nil && !errors.Is(getErr, admission.ErrInvalidQuota):
		return getErr
	}
	if err := del(); err != nil {
		return inputError(err)
	}
	fmt.Fprintf(w, "%s: deleted\n", name)
	return nil
}

// withQuotas connects, runs f on the quota store, and disconnects.
func (a *app) withQuotas(cmd *cobra.Command, f func(*admission.RedisQuotas) error) error {
	rdb, _, err := a.dial(cmd.Context())
	if err != nil {
		return err
	}
	defer rdb.Close()
	return f(admission.NewRedisQuotas(rdb, a.gateOptions()...))
}

// quotaJSON is a quota as the command prints it: durations as Go writes
// them, the mode as "log" or "counter".
type quotaJSON struct {
	Limit    int    `json:"limit"` // -1 (admission.NoLimit): no rate limit
	Window   string `json:"window"`
	MaxDelay string `json:"max_delay"`
	Mode     string `json:"mode"`
	// MaxInFlight is 0 for no cap; MaxParked is the effective bound of a
	// capped tenant's parked backlog, and without a cap the quota's own
	// (its tasks wait their turn in fair queues), 0 when it sets none.
	MaxInFlight int `json:"max_in_flight"`
	MaxParked   int `json:"max_parked"`
	// Weight is the effective weight: 1 when the quota's is 0.
	Weight float64 `json:"weight"`
	Paused bool    `json:"paused"`
}

func toQuotaJSON(q admission.Quota) quotaJSON {
	j := quotaJSON{Limit: q.Limit, Window: q.Window.String(), MaxDelay: q.MaxDelay.String(), Mode: q.Mode.String(), MaxInFlight: q.MaxInFlight,
		Weight: q.EffectiveWeight(), Paused: q.Paused}
	if q.MaxInFlight > 0 {
		j.MaxParked = cmp.Or(q.MaxParked, admission.DefaultMaxParked)
	} else {
		j.MaxParked = q.MaxParked
	}
	return j
}

// String formats j as admission.Quota.String does, e.g.
// "100/1m0s, max delay 30s, counter", so that status prints a quota as
// quota get does.
func (j quotaJSON) String() string {
	w, werr := time.ParseDuration(j.Window)
	d, derr := time.ParseDuration(j.MaxDelay)
	m, merr := admission.ParseMode(j.Mode)
	if err := errors.Join(werr, derr, merr); err != nil {
		// Not from toQuotaJSON: show the fields as they are.
		return fmt.Sprintf("%d/%s, max delay %s, %s", j.Limit, j.Window, j.MaxDelay, j.Mode)
	}
	return admission.Quota{Limit: j.Limit, Window: w, MaxDelay: d, Mode: m, MaxInFlight: j.MaxInFlight, MaxParked: j.MaxParked, Weight: j.Weight, Paused: j.Paused}.String()
}

type quotaEntry struct {
	Tenant      string  `json:"tenant"`
	Limit       int     `json:"limit"`
	Window      string  `json:"window"`
	MaxDelay    string  `json:"max_delay"`
	Mode        string  `json:"mode"`
	MaxInFlight int     `json:"max_in_flight"`
	MaxParked   int     `json:"max_parked"`
	Weight      float64 `json:"weight"`
	Paused      bool    `json:"paused"`
}

func toQuotaEntry(tenant string, q admission.Quota) quotaEntry {
	j := toQuotaJSON(q)
	return quotaEntry{Tenant: tenant, Limit: j.Limit, Window: j.Window, MaxDelay: j.MaxDelay, Mode: j.Mode, MaxInFlight: j.MaxInFlight, MaxParked: j.MaxParked, Weight: j.Weight, Paused: j.Paused}
}

// quota is e's quota without its tenant.
func (e quotaEntry) quota() quotaJSON {
	return quotaJSON{Limit: e.Limit, Window: e.Window, MaxDelay: e.MaxDelay, Mode: e.Mode, MaxInFlight: e.MaxInFlight, MaxParked: e.MaxParked, Weight: e.Weight, Paused: e.Paused}
}

// quotaList is the output of quota list.
type quotaList struct {
	Default *quotaJSON   `json:"default"` // null when there is none
	Tenants []quotaEntry `json:"tenants"` // sorted by tenant
}

func toQuotaList(s admission.StaticQuotas) quotaList {
	l := quotaList{Tenants: []quotaEntry{}}
	if s.Default != nil {
		d := toQuotaJSON(*s.Default)
		l.Default = &d
	}
	for t, q := range s.Tenants {
		l.Tenants = append(l.Tenants, toQuotaEntry(t, q))
	}
	slices.SortFunc(l.Tenants, func(x, y quotaEntry) int { return cmp.Compare(x.Tenant, y.Tenant) })
	return l
}

func writeQuotaTable(w io.Writer, l quotaList) error {
	if l.Default == nil && len(l.Tenants) == 0 {
		_, err := fmt.Fprintln(w, "no quotas")
		return err
	}
	all := make([]quotaJSON, 0, len(l.Tenants)+1)
	if l.Default != nil {
		all = append(all, *l.Default)
	}
	for _, e := range l.Tenants {
		all = append(all, e.quota())
	}
	// The depth and weight columns appear once some quota has a cap or a
	// max parked, or a weight other than 1, so that a table of rate-only
	// quotas reads as it always has.
	capped := slices.ContainsFunc(all, func(q quotaJSON) bool { return q.MaxInFlight > 0 || q.MaxParked > 0 })
	weighted := slices.ContainsFunc(all, func(q quotaJSON) bool { return q.Weight != 1 })
	paused := slices.ContainsFunc(all, func(q quotaJSON) bool { return q.Paused })
	header := "TENANT\tLIMIT\tWINDOW\tMAX DELAY\tMODE"
	if capped {
		header += "\tMAX IN FLIGHT\tMAX PARKED"
	}
	if weighted {
		header += "\tWEIGHT"
	}
	if paused {
		header += "\tPAUSED"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	row := func(name string, q quotaJSON) {
		if q.Limit == admission.NoLimit {
			// No rate limit: its window, delay and mode mean nothing.
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-", name, quotainput.None)
		} else {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s", name, q.Limit, q.Window, q.MaxDelay, q.Mode)
		}
		if capped {
			inFlight, parked := "-", "-"
			if q.MaxInFlight > 0 {
				inFlight = fmt.Sprint(q.MaxInFlight)
			}
			if q.MaxParked > 0 {
				parked = fmt.Sprint(q.MaxParked)
			}
			fmt.Fprintf(tw, "\t%s\t%s", inFlight, parked)
		}
		if weighted {
			fmt.Fprintf(tw, "\t%s", strconv.FormatFloat(q.Weight, 'g', -1, 64))
		}
		if paused {
			fmt.Fprintf(tw, "\t%s", map[bool]string{true: "paused", false: "-"}[q.Paused])
		}
		fmt.Fprintln(tw)
	}
	if l.Default != nil {
		row(defaultRow, *l.Default)
	}
	for _, e := range l.Tenants {
		row(listTenant(e.Tenant), e.quota())
	}
	return tw.Flush()
}

// defaultRow names the default quota's row in quota list's table.
const defaultRow = "(default)"

// listTenant is tenant's name in quota list's table: shortened as
// tableTenant does, and quoted (Go syntax) when it begins with "(" or a
// double quote, so that no tenant's row reads as the default's, and no
// quoted name as another tenant's.
func listTenant(tenant string) string {
	if strings.HasPrefix(tenant, "(") || strings.HasPrefix(tenant, `"`) {
		return tableTenant(strconv.Quote(tenant))
	}
	return tableTenant(tenant)
}

// tableTenantWidth is the widest a tenant name is shown in a table. A
// tenant may be 256 bytes long, which would widen every row of the table.
const tableTenantWidth = 40

// tableTenant shortens a long tenant name for a table, with an ellipsis.
// JSON output always carries the whole name.
func tableTenant(s string) string {
	if utf8.RuneCountInString(s) <= tableTenantWidth {
		return s
	}
	r := []rune(s)
	return string(r[:tableTenantWidth-1]) + "…"
}

func writeJSON(w io.Writer, v any, indent bool) error {
	enc := json.NewEncoder(w)
	if indent {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(v)
}
