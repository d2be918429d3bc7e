package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"github.com/spf13/cobra"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
)

func (a *app) newEnqueueCmd() *cobra.Command {
	var tenant, typ, payload, queue, id string
	var keys []string
	var priority int
	cmd := &cobra.Command{
		Use:   "enqueue --tenant T --type X [--payload JSON|@file] [--queue Q] [--id ID] [--key K]... [--priority P]",
		Short: "Send one task through the gate",
		Long: fmt.Sprintf(`Sends one task through the gate and prints the decision, one of four:
admitted (runs now), deferred until its slot, parked in a dispatched queue
(with what it waits on: the tenant at its --max-in-flight cap, held by its
rate, or its turn in a fair queue), or rejected with when to retry (over its
rate, or its parked backlog full).

The queue name may not hold spaces or control characters: no worker could
be told to read it.

--key puts the task under a concurrency key's quota as well as its tenant's
(admitq key set); give it once for each key, up to %d. --priority orders
the task among its tenant's waiting tasks, higher first (%d to %d, 0 by
default); it never moves the tenant ahead of another. Keys and priority hold
tasks only in a dispatched queue, one that a worker with a gate serves.

Exit status: 0 admitted, deferred or parked, 3 rejected, 1 error, 2 bad usage.`, enqueue.MaxKeys, enqueue.MinPriority, enqueue.MaxPriority),
		Example: `  admitq enqueue --tenant acme --type email:send --payload '{"to":"a@example.com"}'
  admitq enqueue --tenant acme --type report --payload @report.json --queue low
  admitq enqueue --tenant acme --type charge --key api:stripe --priority 10`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range []string{"tenant", "type"} {
				if !cmd.Flags().Changed(f) {
					return usageErrorf("--%s is required", f)
				}
			}
			if err := validateTenants(tenant); err != nil {
				return err
			}
			if strings.TrimSpace(typ) == "" {
				return usageErrorf("--type is empty")
			}
			if strings.ContainsFunc(typ, unicode.IsControl) || !utf8.ValidString(typ) {
				return usageErrorf("--type %q: a task type holds no control characters and is valid UTF-8 (asynqmon and the logs show it)", typ)
			}
			if strings.TrimSpace(queue) == "" {
				return usageErrorf("--queue is empty")
			}
			if err := validateQueue("--queue", queue); err != nil {
				return err
			}
			if cmd.Flags().Changed("id") && strings.TrimSpace(id) == "" {
				return usageErrorf("--id is empty")
			}
			if strings.ContainsFunc(id, unicode.IsControl) || !utf8.ValidString(id) {
				return usageErrorf("--id %q: a task ID holds no control characters and is valid UTF-8 (asynqmon and the logs show it)", id)
			}
			if err := validateKeys("--key", keys...); err != nil {
				return err
			}
			if n := len(distinct(keys)); n > enqueue.MaxKeys {
				return usageErrorf("--key: %d distinct keys, a task may carry at most %d", n, enqueue.MaxKeys)
			}
			if priority < enqueue.MinPriority || priority > enqueue.MaxPriority {
				return usageErrorf("--priority %d: want %d to %d", priority, enqueue.MinPriority, enqueue.MaxPriority)
			}
			body, err := readPayload(payload)
			if err != nil {
				return err
			}
			opts := []asynq.Option{asynq.Queue(queue)}
			if id != "" {
				opts = append(opts, asynq.TaskID(id))
			}
			if len(keys) > 0 {
				opts = append(opts, enqueue.Keys(keys...))
			}
			if cmd.Flags().Changed("priority") {
				opts = append(opts, enqueue.Priority(priority))
			}

			rdb, _, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			log := warnings(a.stderr)
			gate := admission.New(rdb, admission.NewRedisQuotas(rdb, a.gateOptions()...), append(a.gateOptions(), admission.WithLogger(log))...)
			defer gate.Close()
			client := enqueue.NewFromRedis(rdb, gate, enqueue.WithLogger(log))
			info, d, err := client.Enqueue(cmd.Context(), tenant, asynq.NewTask(typ, body), opts...)
			var rej *enqueue.RejectedError
			switch {
			case errors.As(err, &rej) && rej.Decision.Full:
				after := fullRetry(rej.Decision)
				fmt.Fprintf(a.stdout, "rejected: parked backlog full (the tenant's max parked), retry after %v (at %s) or raise --max-parked\n",
					roundDelay(after), rej.Decision.Now.Add(after).Local().Format(time.RFC3339))
				return &exitError{code: exitRejected}
			case errors.As(err, &rej):
				fmt.Fprintf(a.stdout, "rejected, retry after %v (at %s)\n",
					roundDelay(rej.RetryAfter()), rej.Decision.At.Local().Format(time.RFC3339))
				return &exitError{code: exitRejected}
			case errors.Is(err, enqueue.ErrInvalidOption):
				return usageError(err)
			case err != nil:
				return readError(err) // a bad tenant; a stored quota that does not decode is exit 1
			case d.Outcome == admission.Parked:
				why := strings.TrimPrefix(client.WhyParked(cmd.Context(), info), "parked")
				fmt.Fprintf(a.stdout, "parked: task %s in queue %s%s\n", info.ID, info.Queue, strings.Replace(why, ":", ";", 1))
			case d.Outcome == admission.Deferred:
				fmt.Fprintf(a.stdout, "deferred until %s (in %v): task %s in queue %s\n",
					info.NextProcessAt.Local().Format(time.RFC3339), roundDelay(info.NextProcessAt.Sub(d.Now)), info.ID, info.Queue)
			default:
				fmt.Fprintf(a.stdout, "admitted: task %s in queue %s\n", info.ID, info.Queue)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&tenant, "tenant", "", "tenant the task belongs to (required)")
	fs.StringVar(&typ, "type", "", "asynq task type (required)")
	fs.StringVar(&payload, "payload", "", "task payload: JSON, or @file to read it from a file")
	fs.StringVar(&queue, "queue", "default", "asynq queue")
	fs.StringVar(&id, "id", "", "task ID; under a log-mode quota, sending the same ID again takes no second slot (default: a new UUID)")
	fs.StringArrayVar(&keys, "key", nil, "concurrency `key` the task counts against besides its tenant, e.g. api:stripe; repeat for more")
	fs.IntVar(&priority, "priority", 0, fmt.Sprintf("order among the tenant's waiting tasks, higher first (%d to %d)", enqueue.MinPriority, enqueue.MaxPriority))
	return cmd
}

// distinct is ss without repeats.
func distinct(ss []string) map[string]bool {
	m := make(map[string]bool, len(ss))
	for _, s := range ss {
		m[s] = true
	}
	return m
}

// fullRetry is when to try again after a rejection for a full parked
// backlog: a place frees only when one of the tenant's tasks finishes and
// the oldest parked one goes in, which takes at least a worker's poll and
// asynq's whole-second scheduling, so the gate's figure (a window from now,
// which may be a millisecond) is raised to a second.
func fullRetry(d admission.Decision) time.Duration {
	return max(d.Delay(), time.Second)
}

// readPayload reads --payload: JSON text, or @file holding JSON.
func readPayload(v string) ([]byte, error) {
	if v == "" {
		return nil, nil
	}
	b, name := []byte(v), "--payload"
	if file, ok := strings.CutPrefix(v, "@"); ok {
		var err error
		if b, err = os.ReadFile(file); err != nil {
			return nil, usageErrorf("--payload: %w", err)
		}
		name = "--payload " + v
	}
	if !json.Valid(b) {
		return nil, usageErrorf("%s: not valid JSON", name)
	}
	return b, nil
}

// roundDelay rounds a delay for people: to 1 ms below a second, else to
// 100 ms.
func roundDelay(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}
