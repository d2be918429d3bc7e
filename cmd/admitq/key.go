package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/cmd/admitq/internal/quotainput"
)

func (a *app) newKeyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Set, show, pause and delete the quotas of concurrency keys",
		Long: `A key (enqueue.Keys, e.g. "api:stripe") puts a task under the key's quota
as well as its tenant's. A key's quota caps the key's tasks pending or running
in a dispatched queue, across all tenants (--max-in-flight), and may hold them
(pause); it has no rate limit of its own, since its tasks count against their
tenants' rates. A key without a quota is unlimited. Key quotas live in the
Redis hash <prefix>:keyquotas; producers and workers see a change within
about a second.`,
		Args: cobra.ArbitraryArgs,
		RunE: needSubcommand,
	}
	cmd.AddCommand(
		a.newKeySetCmd(false),
		a.newKeySetCmd(true),
		a.newKeyGetCmd(),
		a.newKeyListCmd(),
		a.newKeyDeleteCmd(),
		a.newKeyPauseCmd(true),
		a.newKeyPauseCmd(false),
	)
	return cmd
}

// oneKey is the Args of a command that takes one KEY, and names it when
// it is missing.
func oneKey(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usageErrorf("%s: KEY is missing (usage: %s)", commandName(cmd), cmd.UseLine())
	case len(args) > 1:
		return usageErrorf("%s: want one KEY, got %d arguments (usage: %s)", commandName(cmd), len(args), cmd.UseLine())
	}
	if err := admission.ValidateKey(args[0]); err != nil {
		return usageError(err)
	}
	return nil
}

// keyString formats a key's quota: "max in flight 4, paused", or "no cap".
func keyString(q admission.Quota) string {
	s := "no cap"
	if q.MaxInFlight > 0 {
		s = fmt.Sprintf("max in flight %d", q.MaxInFlight)
	}
	if q.Paused {
		s += ", paused"
	}
	return s
}

// newKeySetCmd is key set, or key update when update is true: the same
// flags, but update needs a quota to change.
func (a *app) newKeySetCmd(update bool) *cobra.Command {
	var (
		maxInFlight int
		limit       string
	)
	use, short := "set KEY --max-in-flight N [--limit none]", "Set a key's quota: a cap on its tasks in the worker queues"
	long := `Sets a key's quota: at most N of the key's tasks pending or running in a
dispatched queue at once, across all tenants; the rest are parked, in order.
--max-in-flight 0 is no cap. A key has no rate limit of its own: --limit may
only be none. A paused key stays paused (key resume resumes it).`
	if update {
		use, short = "update KEY --max-in-flight N", "Change the cap of a key that has a quota"
		long = `Changes the cap of a key's quota, keeping the rest (a pause). A key without a
quota is an error (exit 1), and nothing is written: key set gives it one.`
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Example: `  admitq key set api:stripe --max-in-flight 10
  admitq key update api:stripe --max-in-flight 20`,
		Args: oneKey,
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if !cmd.Flags().Changed("max-in-flight") {
				return usageErrorf("--max-in-flight is required")
			}
			if maxInFlight < 0 {
				return usageErrorf("--max-in-flight %d: want 0 (no cap) or more", maxInFlight)
			}
			if cmd.Flags().Changed("limit") {
				if n, fe := quotainput.ParseLimit(limit); fe != nil || n != admission.NoLimit {
					return usageErrorf("--limit %s: a key has no rate limit of its own (its tasks count against their tenants' rates); want none, or leave it out", limit)
				}
			}
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				ctx := cmd.Context()
				old, err := quotas.GetKey(ctx, key)
				switch {
				case errors.Is(err, admission.ErrNoQuota) && update:
					return fmt.Errorf("key %q has no quota to update; key set %s gives it one; nothing written", key, key)
				case errors.Is(err, admission.ErrNoQuota), errors.Is(err, admission.ErrInvalidQuota) && !update:
					old = admission.Quota{}
				case err != nil:
					return err
				}
				q := admission.Quota{Limit: admission.NoLimit, MaxInFlight: maxInFlight, Paused: old.Paused}
				if err := quotas.SetKey(ctx, key, q); err != nil {
					return inputError(err)
				}
				fmt.Fprintf(a.stdout, "%s: %s\n", key, keyString(q))
				return nil
			})
		},
	}
	cmd.Flags().IntVar(&maxInFlight, "max-in-flight", 0, "the key's tasks pending or running in a dispatched queue at once, across all tenants (0: no cap)")
	if !update {
		cmd.Flags().StringVar(&limit, "limit", quotainput.None, "only none: a key has no rate limit of its own")
	}
	return cmd
}

// keyEntry is a key's quota as key get --json and key list --json print it.
type keyEntry struct {
	Key         string `json:"key"`
	MaxInFlight int    `json:"max_in_flight"` // 0: no cap
	Paused      bool   `json:"paused"`
}

func (a *app) newKeyGetCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "get KEY [--json]",
		Short: "Show a key's quota",
		Long:  `Shows a key's quota. A key without one is unlimited, and get exits 1.`,
		Args:  oneKey,
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				q, err := quotas.GetKey(cmd.Context(), key)
				if errors.Is(err, admission.ErrNoQuota) {
					return fmt.Errorf("key %q has no quota: it is unlimited", key)
				}
				if err != nil {
					return inputError(err)
				}
				if asJSON {
					return writeJSON(a.stdout, keyEntry{Key: key, MaxInFlight: q.MaxInFlight, Paused: q.Paused}, true)
				}
				fmt.Fprintf(a.stdout, "%s: %s\n", key, keyString(q))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) newKeyListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List every key's quota",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				all, err := quotas.ListKeys(cmd.Context())
				if err != nil {
					return err
				}
				l := []keyEntry{}
				for k, q := range all {
					l = append(l, keyEntry{Key: k, MaxInFlight: q.MaxInFlight, Paused: q.Paused})
				}
				slices.SortFunc(l, func(x, y keyEntry) int { return cmp.Compare(x.Key, y.Key) })
				if asJSON {
					return writeJSON(a.stdout, l, true)
				}
				return writeKeyTable(a.stdout, l)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writeKeyTable(w io.Writer, l []keyEntry) error {
	if len(l) == 0 {
		_, err := fmt.Fprintln(w, "no key quotas")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tMAX IN FLIGHT\tPAUSED")
	for _, e := range l {
		inFlight, paused := "-", "-"
		if e.MaxInFlight > 0 {
			inFlight = fmt.Sprint(e.MaxInFlight)
		}
		if e.Paused {
			paused = "paused"
		}
		// Quoted when it could pass for the header, or another name.
		name := e.Key
		if name == "KEY" || strings.HasPrefix(name, `"`) {
			name = fmt.Sprintf("%q", name)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", tableTenant(name), inFlight, paused)
	}
	return tw.Flush()
}

func (a *app) newKeyDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete KEY",
		Short: "Delete a key's quota; the key is then unlimited",
		Long: `Deletes a key's quota; the key is then unlimited, and its parked tasks go in.
A key without a quota is an error (exit 1), and nothing changes.`,
		Args: oneKey,
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				ctx := cmd.Context()
				_, err := quotas.GetKey(ctx, key)
				return deleteQuota(a.stdout, key, fmt.Sprintf("key %q has no quota", key), err,
					func() error { return quotas.DeleteKey(ctx, key) })
			})
		},
	}
}

// newKeyPauseCmd is key pause (pause true) or key resume.
func (a *app) newKeyPauseCmd(pause bool) *cobra.Command {
	use, short, long := "resume KEY", "Let a paused key's tasks go into the worker queues again",
		`Clears the key's Paused: its waiting tasks go in again, in order. A key that is
not paused is left as it is (exit 0); one without a quota is an error (exit 1).`
	if pause {
		use, short, long = "pause KEY", "Hold every task that carries a key out of the worker queues",
			`Sets the key's Paused: no task that carries the key, whatever its tenant,
goes into a dispatched queue until key resume; running tasks finish, new ones
wait, parked, in order. Other tasks are not held back. A key without a quota
is given one, paused, with no cap. A key already paused is left as it is.`
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  oneKey,
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				ctx := cmd.Context()
				q, err := quotas.GetKey(ctx, key)
				switch {
				case errors.Is(err, admission.ErrNoQuota) && !pause:
					return fmt.Errorf("key %q has no quota, so it is not paused; nothing changed", key)
				case errors.Is(err, admission.ErrNoQuota):
					q = admission.Quota{Limit: admission.NoLimit}
				case err != nil:
					return err
				case q.Paused == pause:
					state := "not paused"
					if pause {
						state = "already paused"
					}
					fmt.Fprintf(a.stdout, "%s: %s: %s\n", key, state, keyString(q))
					return nil
				}
				q.Paused = pause
				if err := quotas.SetKey(ctx, key, q); err != nil {
					return inputError(err)
				}
				state := "resumed"
				if pause {
					state = "paused"
				}
				fmt.Fprintf(a.stdout, "%s: %s: %s\n", key, state, keyString(q))
				return nil
			})
		},
	}
}
