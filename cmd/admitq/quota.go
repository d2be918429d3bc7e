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
		Short: "Set, show and delete per-tenant quotas",
		Long: `Quotas live in the Redis hash <prefix>:quotas. Running producers pick up a
change within a second. A tenant without a quota of its own gets the default.`,
		// Without a RunE, cobra would print the help for a missing or
		// misspelt subcommand and exit 0.
		Args: cobra.ArbitraryArgs,
		RunE: needSubcommand,
	}
	cmd.AddCommand(
		a.newQuotaSetCmd(),
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
	limit       int
	window      time.Duration
	maxDelay    time.Duration
	mode        string
	maxInFlight int
	maxParked   int
	weight      float64
}

func (f *quotaFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.IntVar(&f.limit, "limit", 0, "tasks admitted in any window (required)")
	fs.DurationVar(&f.window, "window", 0, "length of the sliding window, e.g. 1s or 1m (required)")
	fs.DurationVar(&f.maxDelay, "max-delay", 0, "how far ahead a task over the limit may be deferred; 0 rejects it at once")
	fs.StringVar(&f.mode, "mode", admission.Log.String(), "how the window is kept: log (exact), or counter for quotas too large to log")
	fs.IntVar(&f.maxInFlight, "max-in-flight", 0, "tasks of the tenant pending or running in the worker queues at once; the rest are parked in order (0: no cap)")
	fs.IntVar(&f.maxParked, "max-parked", 0, fmt.Sprintf("parked tasks the tenant may have before new ones are rejected (0: %d)", admission.DefaultMaxParked))
	fs.Float64Var(&f.weight, "weight", 0, "the tenant's share of a fair queue's worker time against other tenants waiting there, e.g. 3 for three times a weight-1 tenant's (0: 1)")
}

// quota checks the flags, naming them, before anything touches Redis, and
// warns on stderr of a valid quota that will not do what it seems to.
func (f *quotaFlags) quota(cmd *cobra.Command, stderr io.Writer) (admission.Quota, error) {
	for _, name := range []string{"limit", "window"} {
		if !cmd.Flags().Changed(name) {
			return admission.Quota{}, usageErrorf("--%s is required", name)
		}
	}
	// quotainput gives the dashboard's form the same checks and messages.
	q, err := quotainput.Check(f.limit, f.window, f.maxDelay, f.mode, f.maxInFlight, f.maxParked)
	if err == nil {
		q, err = quotainput.WithWeight(q, f.weight)
	}
	if err != nil {
		return admission.Quota{}, usageError(err)
	}
	if w := quotainput.Warning(q); w != "" {
		fmt.Fprintf(stderr, "admitq: warning: %s\n", w)
	}
	return q, nil
}

func (a *app) newQuotaSetCmd() *cobra.Command {
	var f quotaFlags
	cmd := &cobra.Command{
		Use:   "set TENANT --limit N --window D [--max-delay D] [--mode log|counter] [--max-in-flight N [--max-parked M]] [--weight W]",
		Short: "Set a tenant's quota",
		Example: `  admitq quota set acme --limit 100 --window 1m --max-delay 30s
  admitq quota set bulk --limit 1000000 --window 1m --mode counter
  admitq quota set noisy --limit 100 --window 1s --max-in-flight 4 --max-parked 50000
  admitq quota set gold --limit 100 --window 1s --weight 3`,
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
				if err := quotas.Set(cmd.Context(), tenant, q); err != nil {
					return inputError(err)
				}
				fmt.Fprintf(a.stdout, "%s: %s\n", tenant, q)
				return nil
			})
		},
	}
	f.register(cmd)
	return cmd
}

func (a *app) newQuotaSetDefaultCmd() *cobra.Command {
	var f quotaFlags
	cmd := &cobra.Command{
		Use:   "set-default --limit N --window D [--max-delay D] [--mode log|counter] [--max-in-flight N [--max-parked M]] [--weight W]",
		Short: "Set the quota of tenants that have none of their own",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := f.quota(cmd, a.stderr)
			if err != nil {
				return err
			}
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				if err := quotas.SetDefault(cmd.Context(), q); err != nil {
					return inputError(err)
				}
				fmt.Fprintf(a.stdout, "default: %s\n", q)
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
					return inputError(err)
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
	Limit    int    `json:"limit"`
	Window   string `json:"window"`
	MaxDelay string `json:"max_delay"`
	Mode     string `json:"mode"`
	// MaxInFlight is 0 for no cap; MaxParked is the effective bound of a
	// capped tenant's parked backlog, 0 without a cap.
	MaxInFlight int `json:"max_in_flight"`
	MaxParked   int `json:"max_parked"`
	// Weight is the effective weight: 1 when the quota's is 0.
	Weight float64 `json:"weight"`
}

func toQuotaJSON(q admission.Quota) quotaJSON {
	j := quotaJSON{Limit: q.Limit, Window: q.Window.String(), MaxDelay: q.MaxDelay.String(), Mode: q.Mode.String(), MaxInFlight: q.MaxInFlight,
		Weight: q.EffectiveWeight()}
	if q.MaxInFlight > 0 {
		j.MaxParked = cmp.Or(q.MaxParked, admission.DefaultMaxParked)
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
	return admission.Quota{Limit: j.Limit, Window: w, MaxDelay: d, Mode: m, MaxInFlight: j.MaxInFlight, MaxParked: j.MaxParked, Weight: j.Weight}.String()
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
}

func toQuotaEntry(tenant string, q admission.Quota) quotaEntry {
	j := toQuotaJSON(q)
	return quotaEntry{Tenant: tenant, Limit: j.Limit, Window: j.Window, MaxDelay: j.MaxDelay, Mode: j.Mode, MaxInFlight: j.MaxInFlight, MaxParked: j.MaxParked, Weight: j.Weight}
}

// quota is e's quota without its tenant.
func (e quotaEntry) quota() quotaJSON {
	return quotaJSON{Limit: e.Limit, Window: e.Window, MaxDelay: e.MaxDelay, Mode: e.Mode, MaxInFlight: e.MaxInFlight, MaxParked: e.MaxParked, Weight: e.Weight}
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
	// weight other than 1, so that a table of rate-only quotas reads as it
	// always has.
	capped := slices.ContainsFunc(all, func(q quotaJSON) bool { return q.MaxInFlight > 0 })
	weighted := slices.ContainsFunc(all, func(q quotaJSON) bool { return q.Weight != 1 })
	header := "TENANT\tLIMIT\tWINDOW\tMAX DELAY\tMODE"
	if capped {
		header += "\tMAX IN FLIGHT\tMAX PARKED"
	}
	if weighted {
		header += "\tWEIGHT"
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	row := func(name string, q quotaJSON) {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s", name, q.Limit, q.Window, q.MaxDelay, q.Mode)
		if capped {
			inFlight, parked := "-", "-"
			if q.MaxInFlight > 0 {
				inFlight, parked = fmt.Sprint(q.MaxInFlight), fmt.Sprint(q.MaxParked)
			}
			fmt.Fprintf(tw, "\t%s\t%s", inFlight, parked)
		}
		if weighted {
			fmt.Fprintf(tw, "\t%s", strconv.FormatFloat(q.Weight, 'g', -1, 64))
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
