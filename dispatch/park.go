package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch/internal/rule"
	"github.com/admitq/admitq/internal/freshid"
)

// Verdict is what Park decided for a task. Its zero value, NoVerdict,
// is no decision: a zero Ticket, or Park's with an error, lets nothing in.
type Verdict int

const (
	// NoVerdict: Park decided nothing (it failed); the task is not to be
	// enqueued on its account.
	NoVerdict Verdict = iota
	// Direct: the queue is not dispatched for this task; enqueue it as
	// without the dispatcher.
	Direct
	// Straight: the task goes in now. Admit it through the gate and
	// enqueue it; give it back with Abandon if the gate refuses it or the
	// write certainly did not happen.
	Straight
	// Wait: the task waits its turn. Enqueue it with asynq.ProcessAt
	// ParkedUntil (unless the Ticket says Written or Exists); Abandon it if
	// the write certainly did not happen.
	Wait
	// Full: the tenant's waiting backlog is at its MaxParked; nothing was
	// stored.
	Full
)

// Task is what Park needs to know of a task.
type Task struct {
	Queue, Tenant, ID string
	// NotBefore is the task's own asynq.ProcessAt, if any: it is admitted
	// for that time when its turn comes.
	NotBefore time.Time
	// UniqueTTL is its asynq.Unique TTL, if any, which its lock gets when
	// it goes in.
	UniqueTTL time.Duration
	// Deadline is its asynq.Deadline, if any: a waiting task whose
	// deadline passed is archived at its turn instead of going in.
	Deadline time.Time
	// Priority orders the task among its tenant's waiting tasks: higher
	// first, FIFO within a priority (MinPriority to MaxPriority; 0 by
	// default).
	Priority int
	// Keys are the concurrency keys the task counts against besides its
	// tenant, each with its quota as it is now (at most MaxKeys, each
	// named once).
	Keys []Key
	// Message, when set, is the task as asynq's schedule script stores it
	// (asynq's encoded message): a task that waits is then written parked
	// by Park's own script call, in the same step as its entry, and its
	// Ticket says Written. Park refuses it for a task with an asynq.Unique
	// lock; give none for a task asynq would write another way (an
	// asynq.Group).
	Message []byte
}

// Key is a concurrency key a task carries (enqueue.Keys), with what its
// quota says now: the key's MaxInFlight (0: no cap) across all tenants in
// the queue, and whether it is Paused.
type Key struct {
	Name        string
	MaxInFlight int
	Paused      bool
}

// The bounds of Task.Priority and Task.Keys.
const (
	MinPriority = -1000
	MaxPriority = 1000
	// MaxKeys is how many keys a task may carry.
	MaxKeys = 8
)

// String names v: "none", "direct", "straight", "wait" or "full".
func (v Verdict) String() string {
	switch v {
	case NoVerdict:
		return "none"
	case Direct:
		return "direct"
	case Straight:
		return "straight"
	case Wait:
		return "wait"
	case Full:
		return "full"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Ticket is Park's answer.
type Ticket struct {
	Verdict Verdict
	// Now is the Redis time of the decision.
	Now time.Time
	// Waiting is how many tasks the tenant has waiting in the queue, this
	// one included when it waits.
	Waiting int
	// Written: the task had a Message, waits, and is written parked.
	Written bool
	// Exists: the task had a Message, and asynq holds a task with its ID
	// already (a retry whose first call wrote it, or another task's);
	// nothing was stored or written (asynq.ErrTaskIDConflict). The
	// Verdict is Wait, with nothing to give back.
	Exists bool
	task   Task
	// again: the ID was the dispatcher's already (a retry: in run, or
	// parked in asynq); Abandon must not give back what the first call
	// holds.
	again bool
}

// Park decides task's way into its queue under tenant quota q (which the
// caller read from the gate). A tenant with no cap in a queue that is not
// fair, or a queue no live worker with a gate serves, is Direct without a
// script call once the queue's mode is known. A task whose ID package
// enqueue made for this call (it marks ctx) is not written before its
// park, so its park skips the look for the ID among the parked tasks (a
// park the client resends after a lost reply still finds the ID among the
// tasks let in, and, given the task's Message, finds the task it wrote).
func (d *Dispatcher) Park(ctx context.Context, t Task, q admission.Quota) (Ticket, error) {
	if err := d.checkPrefix(); err != nil {
		return Ticket{}, err
	}
	keys, err := checkFlow(&t)
	if err != nil {
		return Ticket{}, err
	}
	if t.Message != nil && t.UniqueTTL > 0 {
		return Ticket{}, fmt.Errorf("%w: Park cannot write a task with a unique lock", ErrInvalidTask)
	}
	calls, err := d.Calls(ctx, t, q)
	if err != nil {
		return Ticket{}, err
	}
	if !calls {
		return Ticket{Verdict: Direct, task: t}, nil
	}
	held := isHeld(t, q)
	maxParked := q.MaxParked
	if maxParked == 0 {
		maxParked = admission.DefaultMaxParked
	}
	args := []any{t.Tenant, t.ID, micros(t.NotBefore),
		max(t.UniqueTTL.Milliseconds(), 0), q.MaxInFlight, maxParked, rule.Weight(q.EffectiveWeight()), flag(q.Paused), micros(t.Deadline),
		rule.FlowID(t.Priority, keys), flag(freshid.Made(ctx, t.ID)), len(t.Keys)}
	for _, k := range t.Keys {
		args = append(args, k.Name, k.MaxInFlight, flag(k.Paused))
	}
	if t.Message != nil {
		args = append(args, t.Message)
	}
	res, err := d.run(ctx, d.scripts.park, t.Queue, args...)
	if err != nil {
		return Ticket{}, err
	}
	verdict, now, waiting, err := parkReply(res)
	if err != nil {
		return Ticket{}, fmt.Errorf("dispatch: queue %q: %w", t.Queue, err)
	}
	tk := Ticket{Now: time.UnixMicro(now), Waiting: int(waiting), task: t}
	switch verdict {
	case parkWait:
		tk.Verdict = Wait
	case parkWritten:
		tk.Verdict, tk.Written = Wait, true
	case parkExists:
		tk.Verdict, tk.again, tk.Exists = Wait, true, true
	case parkWaitAgain:
		tk.Verdict, tk.again = Wait, true
	case parkIn:
		tk.Verdict = Straight
	case parkInAgain:
		tk.Verdict, tk.again = Straight, true
	case parkFull:
		tk.Verdict = Full
	case parkDirect:
		tk.Verdict = Direct
		if held {
			d.warnDirect(t.Queue, t.Tenant)
		}
	default:
		return Ticket{}, fmt.Errorf("dispatch: queue %q: fair_park.lua answered %q", t.Queue, verdict)
	}
	return tk, nil
}

// Calls reports whether Park calls Redis for t under q: whether a live
// worker with a Gate serves t's queue, and the queue is fair or t is held
// there (a cap, a pause or keys). Park answers Direct, without a call,
// when it does not. It reads the queue's mode as Park does (Mode: cached).
func (d *Dispatcher) Calls(ctx context.Context, t Task, q admission.Quota) (bool, error) {
	served, fair, err := d.Mode(ctx, t.Queue)
	if err != nil {
		return false, err
	}
	held := isHeld(t, q)
	if !served && (held || t.Priority != 0) {
		d.warnDirect(t.Queue, t.Tenant)
	}
	return served && (fair || held), nil
}

// isHeld reports whether t is held under q in a queue that is not fair:
// by its tenant's cap or pause, or by keys.
func isHeld(t Task, q admission.Quota) bool {
	return q.MaxInFlight > 0 || q.Paused || len(t.Keys) > 0
}

// checkFlow checks t's tenant, queue, ID, priority and keys, sorts its
// keys by name and drops repeats, and returns their names. A bad key wraps
// admission.ErrInvalidKey, a bad tenant admission.ErrInvalidTenant;
// those, a missing queue or ID, too many keys, a repeated key with two
// quotas, a negative cap or a priority out of range wrap ErrInvalidTask.
func checkFlow(t *Task) ([]string, error) {
	if err := admission.ValidateTenant(t.Tenant); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidTask, err)
	}
	if t.Queue == "" || t.ID == "" {
		return nil, fmt.Errorf("%w: a task needs a queue and an ID (queue %q, ID %q)", ErrInvalidTask, t.Queue, t.ID)
	}
	if len(t.ID) > admission.MaxIDLen {
		return nil, fmt.Errorf("%w: an ID of %d bytes, at most admission.MaxIDLen (%d): the gate admits it by its ID", ErrInvalidTask, len(t.ID), admission.MaxIDLen)
	}
	if t.Priority < MinPriority || t.Priority > MaxPriority {
		return nil, fmt.Errorf("%w: priority %d is outside %d to %d", ErrInvalidTask, t.Priority, MinPriority, MaxPriority)
	}
	if len(t.Keys) == 0 {
		return nil, nil
	}
	ks := slices.Clone(t.Keys)
	slices.SortFunc(ks, func(a, b Key) int { return strings.Compare(a.Name, b.Name) })
	ks = slices.CompactFunc(ks, func(a, b Key) bool { return a == b })
	names := make([]string, len(ks))
	for i, k := range ks {
		if i > 0 && names[i-1] == k.Name {
			return nil, fmt.Errorf("%w: key %q is given twice, with different quotas", ErrInvalidTask, k.Name)
		}
		if k.MaxInFlight < 0 {
			return nil, fmt.Errorf("%w: key %q has a negative MaxInFlight", ErrInvalidTask, k.Name)
		}
		names[i] = k.Name
	}
	if _, err := SortKeys(names); err != nil {
		return nil, err
	}
	t.Keys = ks
	return names, nil
}

// SortKeys checks the concurrency key names a task carries and returns
// them sorted, each once. A bad name wraps admission.ErrInvalidKey; more
// than MaxKeys distinct ones wrap ErrInvalidTask.
func SortKeys(names []string) ([]string, error) {
	for _, k := range names {
		if err := admission.ValidateKey(k); err != nil {
			return nil, err
		}
	}
	keys := slices.Compact(slices.Sorted(slices.Values(names)))
	if len(keys) > MaxKeys {
		return nil, fmt.Errorf("%w: %d distinct keys, a task may carry at most %d (MaxKeys)", ErrInvalidTask, len(keys), MaxKeys)
	}
	return keys, nil
}

// ErrInvalidTask is returned by Park for a task whose priority or keys
// break the bounds above.
var ErrInvalidTask = errors.New("dispatch: invalid task")

// fair_park.lua's verdicts (see its header).
const (
	parkWait      = "wait"
	parkWritten   = "written"
	parkWaitAgain = "wait-again"
	parkIn        = "in"
	parkInAgain   = "in-again"
	parkFull      = "full"
	parkDirect    = "direct"
	parkExists    = "exists"
)

// parkReply reads fair_park.lua's {verdict, now µs, waiting}.
func parkReply(res []any) (verdict string, now, waiting int64, err error) {
	if len(res) != 3 {
		return "", 0, 0, fmt.Errorf("fair_park.lua returned %d values, want 3", len(res))
	}
	if verdict, err = toStr(res[0]); err != nil {
		return "", 0, 0, err
	}
	if now, err = toInt(res[1]); err != nil {
		return "", 0, 0, err
	}
	waiting, err = toInt(res[2])
	return verdict, now, waiting, err
}

// Abandon gives back what tk holds: a Straight task's place among those
// in flight, or a Wait task's entry in its tenant's line. Call it when the
// task was certainly not written, or the gate refused a Straight task.
func (d *Dispatcher) Abandon(ctx context.Context, tk Ticket) error {
	t := tk.task
	if tk.again {
		return nil // what the ID holds is the first call's
	}
	switch tk.Verdict {
	case Straight:
		return d.move(ctx, t.Queue, []moveOp{{op: opFree, id: t.ID}})
	case Wait:
		e := waitingEntry{notBefore: micros(t.NotBefore), parked: tk.Now.UnixMicro(), uniqueTTL: max(t.UniqueTTL.Milliseconds(), 0), id: t.ID}
		names := make([]string, len(t.Keys))
		for i, k := range t.Keys {
			names[i] = k.Name
		}
		return d.move(ctx, t.Queue, []moveOp{{op: opDrop, id: t.ID, tenant: t.Tenant, flow: rule.FlowID(t.Priority, names), entry: e.String()}})
	}
	return nil
}

// waitingEntry is a task's entry in its tenant's line, as fair_park.lua
// writes it: "<not-before µs>|<park µs>|<unique TTL ms>|<task ID>".
type waitingEntry struct {
	notBefore, parked, uniqueTTL int64
	id                           string
}

func (e waitingEntry) String() string {
	return strconv.FormatInt(e.notBefore, 10) + "|" + strconv.FormatInt(e.parked, 10) + "|" +
		strconv.FormatInt(e.uniqueTTL, 10) + "|" + e.id
}

// parseWaitingEntry reads s as a waitingEntry.
func parseWaitingEntry(s string) (waitingEntry, error) {
	f := strings.SplitN(s, "|", 4)
	if len(f) != 4 {
		return waitingEntry{}, fmt.Errorf("dispatch: waiting entry %q has %d fields, want 4", s, len(f))
	}
	var e waitingEntry
	var err error
	for i, p := range []*int64{&e.notBefore, &e.parked, &e.uniqueTTL} {
		if *p, err = strconv.ParseInt(f[i], 10, 64); err != nil {
			return waitingEntry{}, fmt.Errorf("dispatch: waiting entry %q: field %d: %w", s, i+1, err)
		}
	}
	e.id = f[3]
	return e, nil
}

// notBeforeTime is e's not-before time, zero for none.
func (e waitingEntry) notBeforeTime() time.Time {
	if e.notBefore <= 0 {
		return time.Time{}
	}
	return time.UnixMicro(e.notBefore)
}

// LimitLock gives the asynq.Unique lock of task id, just written parked in
// queue, the task's own ttl: asynq sets it to last until ParkedUntil plus
// the TTL, so a parked task archived, deleted or run from outside would
// hold it for centuries. The move shortens it again when the task goes in.
func (d *Dispatcher) LimitLock(ctx context.Context, queue, id string, ttl time.Duration) error {
	if ttl <= 0 {
		return nil
	}
	k := d.keysFor(queue)
	if err := d.scripts.lock.Run(ctx, d.rdb, []string{k.taskPrefix + id}, id, ttl.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("dispatch: queue %q, task %q: limiting its unique lock: %w", queue, id, d.recoverFrom(err))
	}
	return nil
}
