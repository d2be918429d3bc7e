package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
)

// exitNotFound is task's exit code when no queue holds the task.
const exitNotFound = 4

func (a *app) newTaskCmd() *cobra.Command {
	var queue string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "task TASKID [--queue Q] [--json]",
		Short: "Show where a task is and what it waits on",
		Long: `Shows asynq's state of a task (pending, active, scheduled, retry, archived,
completed) and, in a dispatched queue, what the dispatcher holds of it: its
tenant, whether it waits in the tenant's line and at which place, and what
holds it there — the tenant at its cap, the tenant held by its rate until a
time, its turn in a fair queue (or the queue full), its own start time
ahead, or a task asynq does not hold (its producer has not written it yet,
or it was deleted) — or that it is in flight, counted against its tenant's
cap.

Without --queue, task looks for the task in every asynq queue, then among
the dispatcher's entries of every dispatched queue.

Exit status: 0 found, 4 not found, 1 error, 2 bad usage.`,
		Example: `  admitq task 6f1c2d9e-0b7a-4c1e-9d55-2b8f3c4a5e61
  admitq task order-1234 --queue critical --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErrorf("%s: want one TASKID, got %d arguments (usage: %s)", commandName(cmd), len(args), cmd.UseLine())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if strings.TrimSpace(id) == "" {
				return usageErrorf("TASKID is empty")
			}
			if cmd.Flags().Changed("queue") {
				if err := validateQueue("--queue", queue); err != nil {
					return err
				}
			}
			rdb, _, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			quotas := admission.NewRedisQuotas(rdb, a.gateOptions()...)
			gate := admission.New(rdb, quotas, a.gateOptions()...)
			defer gate.Close()
			f := taskFinder{rdb: rdb, insp: asynq.NewInspectorFromRedisClient(rdb), disp: dispatch.New(rdb, gate, nil), quotas: quotas}
			found, err := f.find(cmd.Context(), id, queue)
			if err != nil {
				return err
			}
			if len(found) == 0 {
				where := "any queue"
				if queue != "" {
					where = fmt.Sprintf("queue %q", queue)
				}
				return &exitError{code: exitNotFound, err: fmt.Errorf("task %q: not found in %s: neither asynq nor the dispatcher holds it", id, where)}
			}
			if asJSON {
				return writeJSON(a.stdout, found, true)
			}
			for i, r := range found {
				if i > 0 {
					fmt.Fprintln(a.stdout)
				}
				writeTask(a.stdout, r)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "the task's asynq queue (default: look in every queue)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: a list, one entry per queue that holds the task")
	return cmd
}

// taskReport is what task prints of one queue's task, and its JSON form.
type taskReport struct {
	Queue string `json:"queue"`
	ID    string `json:"id"`
	// State is asynq's state of the task, "" when asynq does not hold it.
	State string `json:"state"`
	// Parked reports that asynq keeps it scheduled at dispatch.ParkedUntil,
	// for the dispatcher to move in at its turn.
	Parked bool   `json:"parked"`
	Type   string `json:"type,omitempty"`
	// NextProcessAt is when asynq will run a scheduled or retry task.
	NextProcessAt *time.Time `json:"next_process_at,omitempty"`
	Retried       int        `json:"retried,omitempty"`
	LastError     string     `json:"last_error,omitempty"`
	Tenant        string     `json:"tenant,omitempty"`
	// MaxInFlight is the tenant's cap in its quota now (0: none).
	MaxInFlight int           `json:"max_in_flight"`
	Dispatch    *taskDispatch `json:"dispatch"` // null: the dispatcher holds nothing of it
}

// taskDispatch is what the dispatcher holds of a task.
type taskDispatch struct {
	Where  string `json:"where"`            // "waiting", "limbo" or "in flight"
	Reason string `json:"reason,omitempty"` // what holds it: cap, rate, full, turn, later, missing, unserved, none
	Why    string `json:"why"`
	// Position is its place in its flow (its tenant's waiting tasks of
	// its priority and keys), from 1, of FlowWaiting; TenantWaiting counts
	// the tenant's waiting tasks in all its flows, FlowsAhead the flows
	// ordered before its own; TenantsAhead the tenants whose next task
	// goes first.
	Position      int `json:"position,omitempty"`
	FlowWaiting   int `json:"flow_waiting,omitempty"`
	FlowsAhead    int `json:"flows_ahead,omitempty"`
	TenantWaiting int `json:"tenant_waiting"`
	// Priority and Keys are the task's; Key is the key that holds it.
	Priority     int        `json:"priority,omitempty"`
	Keys         []string   `json:"keys,omitempty"`
	Key          string     `json:"key,omitempty"`
	TenantsAhead int        `json:"tenants_ahead,omitempty"`
	InFlight     int        `json:"in_flight"`
	Cap          int        `json:"cap"` // as the dispatcher applies it now
	Stage        string     `json:"stage,omitempty"`
	Until        *time.Time `json:"until,omitempty"`
	NotBefore    *time.Time `json:"not_before,omitempty"`
}

// taskFinder finds a task in asynq's queues and the dispatcher's.
type taskFinder struct {
	rdb    redis.UniversalClient
	insp   *asynq.Inspector
	disp   *dispatch.Dispatcher
	quotas *admission.RedisQuotas
}

// find reads task id in queue, or, with no queue, in every queue whose
// asynq task hash holds it; failing that, in every dispatched queue whose
// dispatcher holds an entry for it. None found is no error.
func (f taskFinder) find(ctx context.Context, id, queue string) ([]taskReport, error) {
	queues := []string{queue}
	if queue == "" {
		var err error
		if queues, err = f.queuesHolding(ctx, id); err != nil {
			return nil, err
		}
	}
	fallback := false
	if len(queues) == 0 {
		var err error
		if queues, err = f.disp.Queues(ctx); err != nil {
			return nil, err
		}
		fallback = true
	}
	var out []taskReport
	for _, q := range queues {
		r, ok, err := f.read(ctx, q, id, fallback)
		if err != nil {
			return out, err
		}
		if ok {
			out = append(out, r)
		}
	}
	return out, nil
}

// queuesHolding returns the asynq queues, by name, that hold task id.
func (f taskFinder) queuesHolding(ctx context.Context, id string) ([]string, error) {
	all, err := f.rdb.SMembers(ctx, "asynq:queues").Result()
	if err != nil {
		return nil, fmt.Errorf("listing asynq's queues: %w", err)
	}
	slices.Sort(all)
	exists := make([]*redis.IntCmd, len(all))
	_, err = f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range all {
			exists[i] = p.Exists(ctx, "asynq:{"+q+"}:t:"+id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("looking for task %q in asynq's queues: %w", id, err)
	}
	var out []string
	for i, q := range all {
		if exists[i].Val() > 0 {
			out = append(out, q)
		}
	}
	return out, nil
}

// read reads task id in queue: asynq's view, then the dispatcher's. ok is
// false when neither holds it; onlyHeld skips asynq's view, for a queue
// whose asynq hash is known not to hold it.
func (f taskFinder) read(ctx context.Context, queue, id string, onlyHeld bool) (taskReport, bool, error) {
	r := taskReport{Queue: queue, ID: id}
	if !onlyHeld {
		info, err := f.insp.GetTaskInfo(queue, id)
		switch {
		case err == nil:
			r.State, r.Type, r.Retried, r.LastError = info.State.String(), info.Type, info.Retried, info.LastErr
			r.Tenant = info.Headers[enqueue.TenantHeader]
			if (info.State == asynq.TaskStateScheduled || info.State == asynq.TaskStateRetry) && !info.NextProcessAt.IsZero() {
				at := info.NextProcessAt
				r.NextProcessAt = &at
			}
		case !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound):
			return r, false, fmt.Errorf("asynq: task %q in queue %q: %w", id, queue, err)
		}
	}
	pl, err := f.disp.Locate(ctx, queue, id)
	switch {
	case errors.Is(err, dispatch.ErrTaskNotFound):
		return r, r.State != "", nil
	case err != nil:
		return r, false, err
	}
	r.Tenant, r.Parked = cmp.Or(r.Tenant, pl.Tenant), pl.Parked
	if r.Tenant != "" {
		if q, err := f.quotas.Quota(ctx, r.Tenant); err == nil {
			r.MaxInFlight = q.MaxInFlight
		}
	}
	if pl.Where == dispatch.NotHeld {
		return r, r.State != "", nil
	}
	td := &taskDispatch{Where: pl.Where.String(), Why: pl.Why(), Position: pl.Position, TenantWaiting: pl.TenantWaiting,
		FlowWaiting: pl.FlowWaiting, FlowsAhead: pl.FlowsAhead, Priority: pl.Priority, Key: pl.Key,
		TenantsAhead: pl.TenantsAhead, InFlight: pl.InFlight, Cap: pl.Cap}
	for _, k := range pl.Keys {
		td.Keys = append(td.Keys, k.Key)
	}
	if pl.Where != dispatch.InFlight {
		td.Reason = pl.Reason.String()
	}
	if pl.Stage != 0 {
		td.Stage = pl.Stage.String()
	}
	if !pl.Until.IsZero() {
		td.Until = &pl.Until
	}
	if !pl.NotBefore.IsZero() {
		td.NotBefore = &pl.NotBefore
	}
	r.Dispatch = td
	return r, true, nil
}

// writeTask writes r for people.
func writeTask(w io.Writer, r taskReport) {
	fmt.Fprintf(w, "task %s in queue %s\n", r.ID, r.Queue)
	state := r.State
	switch {
	case state == "":
		state = "does not hold it"
	case r.Parked:
		state = "scheduled, parked for the dispatcher until its turn"
	case r.NextProcessAt != nil:
		state += " until " + r.NextProcessAt.Local().Format(time.RFC3339)
	}
	if r.Retried > 0 {
		state += fmt.Sprintf(" (retried %d times", r.Retried)
		if r.LastError != "" {
			state += fmt.Sprintf(", last error: %s", r.LastError)
		}
		state += ")"
	}
	fmt.Fprintf(w, "  asynq:      %s\n", state)
	if r.Tenant != "" {
		fmt.Fprintf(w, "  tenant:     %s\n", r.Tenant)
	}
	d := r.Dispatch
	switch {
	case d == nil && r.Parked:
		fmt.Fprintln(w, "  dispatcher: holds no entry for it, though asynq keeps it parked for the dispatcher: no turn will move it in (run or delete it with asynq's tools)")
		return
	case d == nil:
		fmt.Fprintln(w, "  dispatcher: holds nothing of it (the queue is not dispatched for its tenant, or the task's place was freed)")
		return
	}
	switch {
	case d.Where == "waiting" && (d.Priority != 0 || len(d.Keys) > 0):
		fmt.Fprintf(w, "  dispatcher: waiting, %s of %d in its flow (%s), %d flows ahead; %d of the tenant's tasks wait\n",
			ordinal(d.Position), d.FlowWaiting, flowText(d.Priority, d.Keys), d.FlowsAhead, d.TenantWaiting)
	case d.Where == "waiting":
		fmt.Fprintf(w, "  dispatcher: waiting, %s of %d in the tenant's line\n", ordinal(d.Position), d.TenantWaiting)
	case d.Where == "in flight":
		fmt.Fprintf(w, "  dispatcher: in flight (%s), counted against the tenant's cap: %s\n", d.Stage, flightOfCap(d.InFlight, r.MaxInFlight))
	default:
		fmt.Fprintf(w, "  dispatcher: %s\n", d.Where)
	}
	why := d.Why
	if d.Reason == dispatch.ReasonCap.String() && r.MaxInFlight != d.Cap {
		why += fmt.Sprintf("; its quota's cap is now %s, which the dispatcher applies from the tenant's next park or finish", capText(r.MaxInFlight))
	}
	if d.Where != "in flight" {
		fmt.Fprintf(w, "  waits on:   %s\n", why)
	}
}

func capText(c int) string {
	if c == 0 {
		return "none"
	}
	return fmt.Sprint(c)
}

// ordinal is n as "1st", "2nd", "3rd", "4th"...
// flowText names a flow by its priority and keys.
func flowText(p int, keys []string) string {
	s := fmt.Sprintf("priority %d", p)
	if len(keys) > 0 {
		s += ", keys " + strings.Join(keys, ", ")
	}
	return s
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return fmt.Sprintf("%d%s", n, suffix)
}
