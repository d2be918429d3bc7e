package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/cmd/admitq/internal/quotainput"
)

func (a *app) newKeyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Set, update, pause, show and delete concurrency keys' quotas",
		Long: `A concurrency key names something tasks share across tenants, such as
"api:stripe" for every task that calls one API; a task carries keys from
enqueue.Keys (or admitq enqueue --key). A key's quota, in the Redis hash
<prefix>:keyquotas, caps the key's tasks pending or running in each
dispatched queue, across all tenants (--max-in-flight), and pauses them
(key pause). A task goes in only when its tenant and every key it carries
allow it; a key at its cap or paused holds back only the tasks that carry
it. A key without a quota is unlimited: there is no default. A key has no
rate limit or weight of its own: its tasks count against their tenants'.
Running producers and workers pick up a change within a second.

A key is 1 to 256 bytes of UTF-8 without control characters.`,
		Example: `  admitq key set api:stripe --max-in-flight 20
  admitq key update api:stripe --max-in-flight 10
  admitq key pause api:stripe
  admitq key resume api:stripe
  admitq key list`,
		Args: cobra.ArbitraryArgs,
		RunE: needSubcommand,
	}
	cmd.AddCommand(
		a.newKeySetCmd(false),
		a.newKeySetCmd(true),
		a.newKeyPauseCmd(true),
		a.newKeyPauseCmd(false),
		a.newKeyGetCmd(),
		a.newKeyListCmd(),
		a.newKeyDeleteCmd(),
	)
	return cmd
}

// keyFlags are the flags of key set and key update: --max-in-flight, and,
// hidden, the tenant quota flags a key's quota does not have, so that
// they are refused by name rather than as unknown.
type keyFlags struct {
	maxInFlight int
	foreign     [len(keyForeignFlags)]string
}

// keyForeignFlags are quota set's flags that a key's quota has no field
// for (admission.Quota.ValidateAsKey).
var keyForeignFlags = [...]string{"limit", "window", "max-delay", "mode", "max-parked", "weight"}

func (f *keyFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.IntVar(&f.maxInFlight, "max-in-flight", 0, "tasks carrying the key pending or running in a dispatched queue at once, across all tenants; the rest wait, in order (0: no cap)")
	for i, name := range keyForeignFlags {
		fs.StringVar(&f.foreign[i], name, "", "not in a key's quota")
		_ = fs.MarkHidden(name)
	}
}

// check refuses the tenant quota flags, and a cap out of range, naming
// the flag, before anything touches Redis.
func (f *keyFlags) check(cmd *cobra.Command) error {
	for _, name := range keyForeignFlags {
		if cmd.Flags().Changed(name) {
			return usageErrorf("--%s: a key's quota has no such field: it only caps (--max-in-flight) and pauses (key pause); the rate, weight and parked bound are its tasks' tenants' (quota set)", name)
		}
	}
	if cmd.Flags().Changed("max-in-flight") {
		if err := checkKeyQuota(admission.Quota{Limit: admission.NoLimit, MaxInFlight: f.maxInFlight}); err != nil {
			return err
		}
	}
	return nil
}

// checkKeyQuota checks q as a key's quota, with the command line's
// messages for its flags.
func checkKeyQuota(q admission.Quota) error {
	if q.MaxInFlight > admission.MaxInFlightCap {
		return usageErrorf("--max-in-flight %d: want at most %d", q.MaxInFlight, admission.MaxInFlightCap)
	}
	if err := quotainput.CheckQuota(q); err != nil {
		return usageError(err)
	}
	if err := q.ValidateAsKey(); err != nil {
		return usageError(err)
	}
	return nil
}

// oneKey is the Args of a command that takes one KEY, and names it when it
// is missing.
func oneKey(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usageErrorf("%s: KEY is missing (usage: %s)", commandName(cmd), cmd.UseLine())
	case len(args) > 1:
		return usageErrorf("%s: want one KEY, got %d arguments (usage: %s)", commandName(cmd), len(args), cmd.UseLine())
	}
	return nil
}

// validateKeys checks key arguments before anything touches Redis.
func validateKeys(flag string, keys ...string) error {
	for _, k := range keys {
		if err := admission.ValidateKey(k); err != nil {
			if flag != "" {
				return usageErrorf("%s: %w", flag, err)
			}
			return usageError(err)
		}
	}
	return nil
}

// keyInputError is inputError for a key's commands: a bad key is the
// user's input too.
func keyInputError(err error) error {
	if errors.Is(err, admission.ErrInvalidKey) {
		return usageError(err)
	}
	return inputError(err)
}

// keyQuotaText is a key's quota as the commands print it: "max in flight
// 20", "no cap, paused". (admission.Quota.String would name a rate limit
// and a parked bound, which a key does not have.)
func keyQuotaText(maxInFlight int, paused bool) string {
	s := "no cap"
	if maxInFlight > 0 {
		s = "max in flight " + strconv.Itoa(maxInFlight)
	}
	if paused {
		s += ", paused"
	}
	return s
}

// newKeySetCmd is key set, or key update (update true).
func (a *app) newKeySetCmd(update bool) *cobra.Command {
	var f keyFlags
	cmd := &cobra.Command{
		Use:   "set KEY --max-in-flight N",
		Short: "Set a concurrency key's quota",
		Long: `Sets a key's quota: --max-in-flight caps the key's tasks pending or running in
each dispatched queue, across all tenants (0: no cap). A paused key stays
paused (key resume resumes it); a key's quota has no other field, so set
resets nothing else. key update changes an existing quota only.`,
		Example: `  admitq key set api:stripe --max-in-flight 20
  admitq key set reports --max-in-flight 0`,
	}
	if update {
		cmd.Use, cmd.Short = "update KEY --max-in-flight N", "Change the given fields of a concurrency key's quota"
		cmd.Long = `Reads the key's quota, changes the fields whose flags are given, and writes it
back: a paused key stays paused. A key without a quota is an error (exit 1):
key set gives it one. Bad flags are a usage error (exit 2), and nothing is
written.`
		cmd.Example = `  admitq key update api:stripe --max-in-flight 10`
	}
	cmd.Args = oneKey
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		key := args[0]
		if err := validateKeys("", key); err != nil {
			return err
		}
		if err := f.check(cmd); err != nil {
			return err
		}
		if !cmd.Flags().Changed("max-in-flight") {
			if update {
				return usageErrorf("key update %s: give a field to change: --max-in-flight (key pause and key resume pause it)", key)
			}
			return usageErrorf("--max-in-flight is required: a number, or 0 for no cap")
		}
		return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
			ctx := cmd.Context()
			old, err := quotas.GetKey(ctx, key)
			had := err == nil
			switch {
			case update && errors.Is(err, admission.ErrNoQuota):
				return fmt.Errorf("key %q has no quota to update; key set %s gives it one; nothing written", key, key)
			case update && err != nil:
				return err
			case errors.Is(err, admission.ErrNoQuota), errors.Is(err, admission.ErrInvalidQuota):
				// None, or one that does not decode: writing over it mends it.
				old = admission.Quota{Limit: admission.NoLimit}
			case err != nil:
				return err
			}
			q := admission.Quota{Limit: admission.NoLimit, MaxInFlight: f.maxInFlight, Paused: old.Paused}
			if had && q == old {
				fmt.Fprintf(a.stdout, "%s: %s (unchanged)\n", key, keyQuotaText(q.MaxInFlight, q.Paused))
				return nil
			}
			if err := quotas.SetKey(ctx, key, q); err != nil {
				return keyInputError(err)
			}
			if had {
				fmt.Fprintf(a.stdout, "%s: %s (was %s)\n", key, keyQuotaText(q.MaxInFlight, q.Paused), keyQuotaText(old.MaxInFlight, old.Paused))
			} else {
				fmt.Fprintf(a.stdout, "%s: %s\n", key, keyQuotaText(q.MaxInFlight, q.Paused))
			}
			return nil
		})
	}
	f.register(cmd)
	return cmd
}

// newKeyPauseCmd is key pause (pause true) or key resume.
func (a *app) newKeyPauseCmd(pause bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "resume KEY",
		Short: "Let a paused key's tasks go into the worker queues again",
		Long: `Clears the key's Paused, keeping its cap: its waiting tasks go into the
dispatched queues again, in order, as their tenants allow. A key that is
not paused is left as it is (exit 0); one without a quota is an error
(exit 1).`,
		Example: `  admitq key resume api:stripe`,
	}
	if pause {
		cmd.Use, cmd.Short = "pause KEY", "Hold a key's tasks out of the worker queues until resume"
		cmd.Long = `Sets the key's Paused, keeping its cap: no task carrying the key goes into a
dispatched queue (one served by a worker with a gate), whatever its tenant,
until key resume; running tasks finish, and new ones wait, parked, in order.
Tasks without the key are not held back. Producers and workers see it
within about a second. A key already paused is left as it is (exit 0).

A key without a quota is given one with no cap, paused (key delete KEY later
makes it unlimited again).`
		cmd.Example = `  admitq key pause api:stripe`
	}
	cmd.Args = oneKey
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		key := args[0]
		if err := validateKeys("", key); err != nil {
			return err
		}
		return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
			ctx := cmd.Context()
			q, err := quotas.GetKey(ctx, key)
			fresh := false
			switch {
			case errors.Is(err, admission.ErrNoQuota) && !pause:
				return fmt.Errorf("key %q has no quota, so it is not paused; nothing changed", key)
			case errors.Is(err, admission.ErrNoQuota):
				q, fresh = admission.Quota{Limit: admission.NoLimit}, true
			case err != nil:
				return keyInputError(err)
			}
			if q.Paused == pause {
				state := "not paused"
				if pause {
					state = "already paused"
				}
				fmt.Fprintf(a.stdout, "%s: %s: %s\n", key, state, keyQuotaText(q.MaxInFlight, q.Paused))
				return nil
			}
			q.Paused = pause
			if err := quotas.SetKey(ctx, key, q); err != nil {
				return keyInputError(err)
			}
			state := "resumed"
			if pause {
				state = "paused"
			}
			fmt.Fprintf(a.stdout, "%s: %s: %s\n", key, state, keyQuotaText(q.MaxInFlight, q.Paused))
			if fresh {
				fmt.Fprintf(a.stderr, "admitq: note: %s had no quota: it now has one with no cap, paused; key delete %s makes it unlimited again\n", key, key)
			}
			return nil
		})
	}
	return cmd
}

func (a *app) newKeyGetCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "get KEY [--json]",
		Short:   "Show a concurrency key's quota",
		Long:    `Shows a key's quota. A key without one is unlimited, and get says so with exit 1.`,
		Example: `  admitq key get api:stripe --json`,
		Args:    oneKey,
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := validateKeys("", key); err != nil {
				return err
			}
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				q, err := quotas.GetKey(cmd.Context(), key)
				if errors.Is(err, admission.ErrNoQuota) {
					return fmt.Errorf("key %q has no quota: it is unlimited", key)
				}
				if err != nil {
					return keyInputError(err)
				}
				if asJSON {
					return writeJSON(a.stdout, toKeyEntry(key, q), true)
				}
				fmt.Fprintf(a.stdout, "%s: %s\n", key, keyQuotaText(q.MaxInFlight, q.Paused))
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
		Short: "List every concurrency key's quota, by key",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				all, err := quotas.ListKeys(cmd.Context())
				if err != nil {
					return err
				}
				l := toKeyList(all)
				if asJSON {
					return writeJSON(a.stdout, l, true)
				}
				return writeKeyTable(a.stdout, l.Keys, "no key quotas")
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) newKeyDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete KEY",
		Short: "Delete a concurrency key's quota; the key is then unlimited",
		Long: `Deletes a key's quota: its tasks are then neither capped nor paused by it. A
key without a quota is an error (exit 1), and nothing changes.`,
		Example: `  admitq key delete api:stripe`,
		Args:    oneKey,
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := validateKeys("", key); err != nil {
				return err
			}
			return a.withQuotas(cmd, func(quotas *admission.RedisQuotas) error {
				ctx := cmd.Context()
				_, err := quotas.GetKey(ctx, key)
				return deleteQuota(a.stdout, key, fmt.Sprintf("key %q has no quota", key), err,
					func() error { return keyInputError(quotas.DeleteKey(ctx, key)) })
			})
		},
	}
}

// keyEntry is a key's quota as the commands print it in JSON.
type keyEntry struct {
	Key         string `json:"key"`
	MaxInFlight int    `json:"max_in_flight"` // 0: no cap
	Paused      bool   `json:"paused"`
}

func toKeyEntry(key string, q admission.Quota) keyEntry {
	return keyEntry{Key: key, MaxInFlight: q.MaxInFlight, Paused: q.Paused}
}

// keyList is the output of key list --json.
type keyList struct {
	Keys []keyEntry `json:"keys"` // sorted by key
}

func toKeyList(all map[string]admission.Quota) keyList {
	l := keyList{Keys: make([]keyEntry, 0, len(all))}
	for k, q := range all {
		l.Keys = append(l.Keys, toKeyEntry(k, q))
	}
	slices.SortFunc(l.Keys, func(x, y keyEntry) int { return cmp.Compare(x.Key, y.Key) })
	return l
}

// writeKeyTable writes keys' quotas as a table, or none when there are
// none.
func writeKeyTable(w io.Writer, keys []keyEntry, none string) error {
	if len(keys) == 0 {
		_, err := fmt.Fprintln(w, none)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	writeKeyRows(tw, keys)
	return tw.Flush()
}

// writeKeyRows writes keys' quotas as tab-separated rows under a header,
// for a tabwriter. Long keys are shortened as tenants are (tableTenant).
func writeKeyRows(w io.Writer, keys []keyEntry) {
	fmt.Fprintln(w, "KEY\tMAX IN FLIGHT\tPAUSED")
	for _, k := range keys {
		limit := "-"
		if k.MaxInFlight > 0 {
			limit = strconv.Itoa(k.MaxInFlight)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", tableTenant(k.Key), limit, map[bool]string{true: "paused", false: "-"}[k.Paused])
	}
}
