package enqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/internal/freshid"
	"github.com/admitq/admitq/internal/rediserr"
)

// releaseTimeout bounds the Release that follows a failed enqueue. It runs
// on a context that ignores the caller's cancellation, since a cancelled
// enqueue is the very case whose slot must be given back; the gate's own
// per-call deadline usually ends it much sooner.
const releaseTimeout = time.Second

// Client enqueues asynq tasks through an admission gate, so that no tenant
// puts more than its quota of tasks into the worker queues in any window.
// Most callers want Enqueue.
//
// Create a Client with NewFromRedis or New; the zero value is not usable. A
// Client is safe for concurrent use, and meant to be shared: it gives a
// slot back only once no call of its own with the task's ID relies on it.
type Client struct {
	asynq *asynq.Client
	gate  *admission.Gate
	newID func() string
	// unbatched: WithBatching(false), read by NewFromRedis.
	unbatched bool
	// rdb is asynq's Redis, for a Client made by NewFromRedis, whose
	// asynq.Client writes through a pipelined client that traces what it
	// sends (writeTrace); nil for New.
	rdb redis.UniversalClient
	// claims are the calls in flight with IDs of the caller's choosing.
	claims claims
	// disp routes tasks of dispatched queues (caps and fair queues).
	disp *dispatch.Dispatcher
	// twoCalls: asynq's write of a parked task is not the script call
	// parkWriting knows, so every park goes alone.
	twoCalls atomic.Bool
	// log takes the dispatcher's warnings (WithLogger); nil: slog.Default.
	log *slog.Logger
}

// An Option configures a Client.
type Option interface {
	apply(*Client)
}

type optionFunc func(*Client)

func (f optionFunc) apply(c *Client) { f(c) }

// WithIDFunc sets how task IDs are made for tasks enqueued without an
// asynq.TaskID option. Each ID must be unique across all producers, since
// it is both the asynq task ID and the tenant's log entry; a made ID is
// taken to be new, so a repeat is not looked for as a retry. Nil, the default,
// means a random (version 4) UUID, as uuid.NewString makes.
func WithIDFunc(f func() string) Option {
	return optionFunc(func(c *Client) {
		if f != nil {
			c.newID = f
		}
	})
}

// WithBatching turns group commit of asynq's writes on or off for a Client
// made by NewFromRedis; it is on by default. Off, each task's write is a
// round trip of its own, as with asynq's own Client. It has no effect on
// New, whose asynq.Client writes as it was made to.
func WithBatching(on bool) Option {
	return optionFunc(func(c *Client) { c.unbatched = !on })
}

// WithLogger gives the Client a logger for its warnings, such as a task
// with a cap, a pause, keys or a priority sent to a queue that no worker
// with a gate serves (so they hold nothing there), logged once a queue.
// Nil, the default, means slog.Default.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *Client) { c.log = l })
}

// made reports a Client that New or NewFromRedis did not make (a zero or
// nil one), which has nothing to enqueue with.
func (c *Client) made() error {
	if c == nil || c.gate == nil {
		return errors.New("enqueue: the Client was not made by New or NewFromRedis")
	}
	return nil
}

// logger returns the Client's logger (WithLogger), or slog.Default.
func (c *Client) logger() *slog.Logger {
	if c.log == nil {
		return slog.Default()
	}
	return c.log
}

// NewFromRedis returns a Client that admits tasks through g and enqueues
// them with an asynq.Client of its own on rdb, the Redis of the worker
// queues. It is New(asynq.NewClientFromRedisClient(rdb), g, opts...), but
// faster under load: the task writes of concurrent Enqueue calls share
// Redis pipelines (group commit), a few small pipelines in flight at once,
// so that Redis and the producer each do one read and one write for many
// tasks instead of for each. A lone call goes out at once; no timer waits
// for company. Each task is still asynq's own script call, with its own
// reply. Hooks on rdb see these writes as pipelines (ProcessPipelineHook),
// on a context of the pipeline's own, which carries the latest deadline
// among its callers, but not their values. WithBatching(false) turns group
// commit off.
//
// Either way, a Client made by NewFromRedis keeps exact account of slots,
// which New cannot: a write whose ctx ends before it is sent is never
// sent, and its slot goes back; one that is sent goes out whatever
// happens to its ctx after (with at least a second to leave, so that
// go-redis never fails it unsent), and its caller waits for the reply, as
// a plain go-redis call does once it has written its command; and a
// refused duplicate (asynq.ErrDuplicateTask) is checked against asynq's
// Redis before its slot goes back.
//
// rdb may be a *redis.Client, a *redis.ClusterClient (go-redis splits each
// pipeline per node) or any redis.UniversalClient, and may be g's own
// client. The caller owns rdb and g; the Client holds no goroutines while
// idle and needs no Close. NewFromRedis panics if rdb or g is nil.
func NewFromRedis(rdb redis.UniversalClient, g *admission.Gate, opts ...Option) *Client {
	if rdb == nil || g == nil {
		panic("enqueue: NewFromRedis needs a non-nil redis.UniversalClient and *admission.Gate")
	}
	c := newClient(g, opts)
	c.rdb = rdb
	c.disp = dispatch.New(rdb, c.gate, c.log)
	p := newPipelined(rdb)
	p.direct = c.unbatched
	c.disp.ParkVia(p)
	c.asynq = asynq.NewClientFromRedisClient(p)
	return c
}

// New returns a Client that admits tasks through g and enqueues them with c.
// The caller owns both and closes c. NewFromRedis makes the asynq.Client
// itself and is faster under load.
//
// asynq schedules whole seconds, so unless g already rounds deferred slots
// to a whole number of seconds, the Client decides through
// g.AtGranularity(time.Second), which shares g's Redis client, quotas and
// state. New panics if c or g is nil.
func New(c *asynq.Client, g *admission.Gate, opts ...Option) *Client {
	if c == nil || g == nil {
		panic("enqueue: New needs a non-nil *asynq.Client and *admission.Gate")
	}
	cl := newClient(g, opts)
	cl.asynq = c
	cl.disp = dispatch.New(g.Redis(), cl.gate, cl.log)
	return cl
}

// newClient is a Client on g with opts applied, for New and NewFromRedis to
// give an asynq.Client.
func newClient(g *admission.Gate, opts []Option) *Client {
	if g.Granularity()%time.Second != 0 {
		g = g.AtGranularity(time.Second)
	}
	c := &Client{gate: g, newID: newTaskID}
	for _, o := range opts {
		o.apply(c)
	}
	return c
}

// Enqueue admits task for tenant, then enqueues it with asynq, as the
// package doc describes: Admitted (runs now), Deferred (scheduled for its
// slot, Decision.At), Parked (stored in asynq's scheduled set until
// ParkedUntil, to go in at its turn) or Rejected (a *RejectedError, which
// matches ErrRejected and says when to retry). Nothing else is enqueued.
//
// The task's ID is the tenant's log entry: an asynq.TaskID option (the
// call's over the task's), or one Enqueue makes. A task with its own
// asynq.ProcessAt or ProcessIn is charged for when it will run. Keys and
// Priority, given here or to asynq.NewTask, put the task under concurrency
// keys' quotas and order it among its tenant's waiting tasks; asynq never
// sees them. Options asynq would refuse, and bad Keys or Priority, are
// refused before admission (ErrInvalidOption), and the task itself is not
// modified: the tenant and keys go in the enqueued copy's headers.
//
// When the write fails after admission, the slot goes back only when no
// task can hold it; any other failure is ambiguous (IsAmbiguous): retry
// with the same ID. When ctx is done, the error matches ctx.Err() and
// context.Cause(ctx). The Decision is returned with any error from asynq,
// for logging; it is the zero value when the gate was not asked or failed.
func (c *Client) Enqueue(ctx context.Context, tenant string, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, admission.Decision, error) {
	if err := c.made(); err != nil {
		return nil, admission.Decision{}, err
	}
	p, err := c.prepare(tenant, task, opts)
	if err != nil {
		return nil, admission.Decision{}, err
	}
	h, err := c.join(ctx, p)
	if err != nil {
		return nil, admission.Decision{}, err
	}
	cc := callFor(ctx, p)
	d, tk, err := c.admit(cc, p)
	if err != nil {
		return nil, admission.Decision{}, c.settle(ctx, h, admission.Decision{}, cc.parkFate(), err)
	}
	info, f, err := c.write(cc, p, d)
	if d.Outcome != admission.Rejected {
		err = c.abandon(ctx, p, tk, f, err)
	}
	return info, d, c.settle(ctx, h, d, f, err)
}

// Result is the outcome of one task of EnqueueBatch. Ask Enqueued whether
// the task went in: a zero Result has no error, and did not.
type Result struct {
	// Info describes the enqueued task; nil when Err is set.
	Info *asynq.TaskInfo
	// Decision is the gate's decision for the task; the zero value when the
	// task was not admitted because it was invalid.
	Decision admission.Decision
	// Err is what Enqueue would have returned: a *RejectedError, asynq's
	// error, or an error for an invalid task. Nil when the task was enqueued.
	Err error
}

// Enqueued reports whether the task was enqueued: no error, and asynq's
// description of the task (false for a zero Result).
func (r Result) Enqueued() bool { return r.Err == nil && r.Info != nil }

// EnqueueBatch admits tasks for tenant in one gate round trip, then
// enqueues each as Enqueue does, in order, and returns one Result per task,
// in the order of tasks. opts apply to every task, so they must not hold an
// asynq.TaskID. (Tasks with times of their own, asynq.ProcessAt or
// ProcessIn, take a round trip for each run of tasks with the same time.)
//
// Slots never go backwards through the batch, and once one task is rejected
// so is every task after it that starts at the same time. A task that is
// invalid (nil, with an empty type or ID, or with options Enqueue refuses,
// ErrInvalidOption, its own or opts) gets an error in its Result and is
// not admitted. Tasks with keys or a priority (Keys, Priority) go through
// the dispatcher one by one.
//
// The error is non-nil, and the results nil, only when nothing was admitted:
// the tenant is invalid, there are more than admission.MaxBatch tasks
// (admission.ErrBatchTooLarge), opts hold a TaskID, two tasks have the same ID
// (one ID is one task, and one slot), or the gate failed (say, Redis is
// unavailable, on the first run of tasks). Otherwise every task's fate is in
// its Result.
func (c *Client) EnqueueBatch(ctx context.Context, tenant string, tasks []*asynq.Task, opts ...asynq.Option) ([]Result, error) {
	if err := c.made(); err != nil {
		return nil, err
	}
	if err := admission.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	if len(tasks) > admission.MaxBatch {
		return nil, fmt.Errorf("enqueue: %w: %d tasks, at most admission.MaxBatch (%d) a call", admission.ErrBatchTooLarge, len(tasks), admission.MaxBatch)
	}
	if hasTaskID(opts) {
		return nil, errors.New("enqueue: EnqueueBatch options hold an asynq.TaskID, which would give every task the same ID; set it on each task instead")
	}
	rs := make([]Result, len(tasks))
	ps, made, err := c.prepareAll(tenant, tasks, opts, rs)
	if err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return rs, nil
	}
	hs := make([]hold, 0, len(ps))
	leave := func(err error) error {
		for _, h := range hs {
			err = c.settle(ctx, h, admission.Decision{}, unwritten, err)
		}
		return err
	}
	for _, p := range ps {
		h, err := c.join(ctx, p)
		if err != nil {
			return nil, leave(err)
		}
		hs = append(hs, h)
	}
	actx := ctx
	if made {
		ids := make([]string, len(ps))
		for j, p := range ps {
			ids[j] = p.id
		}
		actx = freshid.Mark(ctx, ids...)
	}
	ccs := make([]*callContext, len(ps))
	for j, p := range ps {
		ccs[j] = callFor(actx, p)
	}
	ds, tks, errs, err := c.admitAll(actx, tenant, ps, ccs)
	if err != nil {
		return nil, leave(err)
	}
	for j, p := range ps {
		r := &rs[p.index]
		if errs[j] != nil {
			r.Err = c.settle(ctx, hs[j], admission.Decision{}, ccs[j].parkFate(), errs[j])
			continue
		}
		r.Decision = ds[j]
		info, f, err := c.write(ccs[j], p, ds[j])
		if ds[j].Outcome != admission.Rejected {
			err = c.abandon(ctx, p, tks[j], f, err)
		}
		r.Info, r.Err = info, c.settle(ctx, hs[j], ds[j], f, err)
	}
	return rs, nil
}

// prepareAll prepares tasks for EnqueueBatch, putting each invalid one's
// error in its Result. made reports that every ID is Enqueue's own; err,
// that two tasks have the same ID.
func (c *Client) prepareAll(tenant string, tasks []*asynq.Task, opts []asynq.Option, rs []Result) (ps []prepared, made bool, err error) {
	ps = make([]prepared, 0, len(tasks))
	made = true
	seen := make(map[string]int, len(tasks))
	for i, t := range tasks {
		p, err := c.prepare(tenant, t, opts)
		if err != nil {
			rs[i].Err = fmt.Errorf("task %d: %w", i, err)
			continue
		}
		if first, ok := seen[p.id]; ok {
			return nil, false, fmt.Errorf("enqueue: EnqueueBatch: tasks %d and %d have the same ID %q; a task ID is one task", first, i, p.id)
		}
		seen[p.id] = i
		p.index = i
		made = made && p.made
		ps = append(ps, p)
	}
	return ps, made, nil
}

// prepared is a task ready to be admitted and enqueued.
type prepared struct {
	tenant string
	task   *asynq.Task // the caller's task
	// opts are every option the task is enqueued with, in the order asynq
	// applies them: the task's own, the caller's Enqueue options (neither
	// with Keys or Priority, which are Enqueue's), then the ID if made
	// here. There is room for one more, the slot of a deferred
	// task. The enqueued task carries them all, so that asynq, which
	// appends Enqueue's options to the task's, has nothing to copy.
	opts  []asynq.Option
	sched scheduling
	id    string
	made  bool // Enqueue made id: no other call has it
	index int  // position in an EnqueueBatch
}

// stampHeaders stands in for the headers of a task that has none: asynq
// copies a task's headers (asynq.NewTaskWithHeaders), and a copy of this
// has room for the two the Client sets. It is only ever read.
var stampHeaders = map[string]string{TenantHeader: "", SlotHeader: ""}

// prepare checks task and works out its ID, its requested run time and
// the options it will be enqueued with. It touches no Redis.
func (c *Client) prepare(tenant string, task *asynq.Task, opts []asynq.Option) (prepared, error) {
	if task == nil {
		return prepared{}, errors.New("enqueue: nil task")
	}
	if isBlank(task.Type()) {
		return prepared{}, fmt.Errorf("enqueue: task type %q is empty", task.Type())
	}
	topts, err := taskOptions(task)
	if err != nil {
		return prepared{}, err
	}
	if err := checkOptions(topts, opts); err != nil {
		return prepared{}, err
	}
	s := readScheduling(time.Now(), topts, opts)
	// asynq ignores options it does not know, but Keys and Priority are
	// Enqueue's alone: they are read above and not passed on.
	all := make([]asynq.Option, 0, len(topts)+len(opts)+2)
	all = appendForAsynq(appendForAsynq(all, topts), opts)
	p := prepared{tenant: tenant, task: task, sched: s, id: s.id}
	if s.id == "" {
		p.id, p.made = c.newID(), true
		// Appended, not prepended: asynq applies the last TaskID, and
		// neither the task's nor the caller's options hold one.
		all = append(all, asynq.TaskID(p.id))
	}
	if isBlank(p.id) {
		return prepared{}, fmt.Errorf("enqueue: task ID %q is empty", p.id)
	}
	if len(p.id) > admission.MaxIDLen {
		return prepared{}, fmt.Errorf("enqueue: %w: a task ID of %d bytes, at most admission.MaxIDLen (%d)", admission.ErrInvalidID, len(p.id), admission.MaxIDLen)
	}
	p.opts = all
	return p, nil
}

// join makes p's call a member of its ID's group (see claims).
func (c *Client) join(ctx context.Context, p prepared) (hold, error) {
	if p.made {
		return hold{}, nil
	}
	return c.claims.join(ctx, p.tenant, p.id)
}

// callContext is the context of one task's admission and write: the
// caller's ctx, marked (freshid) with the task's ID when Enqueue made it,
// so that the gate gives its slot back should ctx end before the decision
// arrives (a caller's own ID keeps its slot then, for its retry), and
// carrying the trace of its write (writeTrace). One allocation per call,
// where context.WithValue would take three.
type callContext struct {
	context.Context
	made  string // the task's ID when Enqueue made it, else ""
	trace writeTrace
	// along is the park that writes the task (parkWriting), once tried.
	along *along
}

func (c *callContext) Value(key any) any {
	switch key.(type) {
	case writeTraceKey:
		return &c.trace
	case alongKey:
		if c.along == nil {
			return nil
		}
		return c.along
	}
	if freshid.IsKey(key) {
		// This call's own mark, not a caller's (Enqueue within Enqueue),
		// and only of its own ID.
		if c.made == "" {
			return nil
		}
		return c
	}
	return c.Context.Value(key)
}

// callFor returns the context of p's admission and write.
func callFor(ctx context.Context, p prepared) *callContext {
	cc := &callContext{Context: ctx}
	if p.made {
		cc.made = p.id
	}
	return cc
}

// Made reports whether id is the task ID this call made (freshid.Marker).
func (c *callContext) Made(id string) bool { return c.made != "" && id == c.made }

// fate is what became of a task's write.
type fate int

const (
	unwritten fate = iota // certainly not written by this call
	maybe                 // may be in the queue
	written               // in the queue
)

// write acts on the gate's decision d for p: it enqueues the task, unless
// it was rejected or ctx is done, and says what became of it. A task that
// its park wrote (parkWriting) is not written again: write returns what
// became of that write.
func (c *Client) write(cc *callContext, p prepared, d admission.Decision) (*asynq.TaskInfo, fate, error) {
	if a := cc.along; a != nil {
		return a.info, a.fate, a.werr
	}
	ctx := cc.Context
	if d.Outcome == admission.Rejected {
		return nil, unwritten, &RejectedError{Decision: d}
	}
	opts, slot := p.opts, d.At
	if d.Outcome == admission.Parked {
		opts = append(opts, asynq.ProcessAt(ParkedUntil)) // park.go
	}
	if d.Outcome == admission.Deferred {
		// The slot is a whole second already, unless another Gate with a
		// finer granularity recorded this ID; rounding up is never early.
		slot = ceilSecond(d.At)
		if !p.sched.at.After(slot) {
			opts = append(opts, asynq.ProcessAt(slot)) // into the room prepare left
		}
	}
	if ctx.Err() != nil {
		// Done after admission: asynq is not called.
		return nil, unwritten, fmt.Errorf("enqueue: tenant %q, task %q: not enqueued: %w", p.tenant, p.id, ctxError(ctx))
	}
	info, err := c.asynq.EnqueueContext(cc, c.task(p, opts, slot)) // the task carries every option
	return c.wrote(cc, p, d, info, err)
}

// task returns the task asynq writes for p, with opts: a copy of the
// caller's, with the tenant, its slot (or the caller's own later time) and
// its keys in its headers.
func (c *Client) task(p prepared, opts []asynq.Option, slot time.Time) *asynq.Task {
	if p.sched.at.After(slot) {
		// The caller's own later time: asynq has it, or, for a parked
		// task, the gate keeps it and the task is released no earlier.
		slot = p.sched.at
	}
	h := p.task.Headers()
	if h == nil {
		h = stampHeaders
	}
	// asynq copies h: the caller's task keeps its own headers.
	task := asynq.NewTaskWithHeaders(p.task.Type(), p.task.Payload(), h, opts...)
	th := task.Headers()
	th[TenantHeader] = p.tenant
	th[SlotHeader] = strconv.FormatInt(slot.UnixMilli(), 10)
	if len(p.sched.keys) > 0 {
		th[KeysHeader] = keysHeader(p.sched.keys)
	} else {
		// The caller's headers may hold a stale one, as a task a worker
		// handled and enqueues again does.
		delete(th, KeysHeader)
	}
	return task
}

// wrote says what became of asynq's write of p (info, err) under decision
// d.
func (c *Client) wrote(cc *callContext, p prepared, d admission.Decision, info *asynq.TaskInfo, err error) (*asynq.TaskInfo, fate, error) {
	ctx := cc.Context
	if err == nil {
		if d.Outcome == admission.Parked && p.sched.unique > 0 {
			// Best effort: the task is written, and its move shortens the
			// lock again when it goes in; only a parked task that leaves
			// from outside keeps a long lock if this fails.
			if err := c.disp.LimitLock(cc, p.sched.queue, p.id, p.sched.unique); err != nil {
				c.logger().Warn("admitq: shortening a parked task's uniqueness lock failed; its move into the queue shortens it", "queue", p.sched.queue, "tenant", p.tenant, "task_id", p.id, "err", err)
			}
		}
		return info, written, nil
	}
	if info, ok := c.ownConflict(ctx, p, err); ok {
		return info, written, nil
	}
	f := c.fateOf(p, &cc.trace, err)
	err = withCancel(ctx, err)
	if f == unwritten && cc.trace.oom.Load() {
		err = fmt.Errorf("%w: %w", ErrOutOfMemory, err)
	}
	return nil, f, fmt.Errorf("enqueue: tenant %q, task %q: %w", p.tenant, p.id, err)
}

// ownConflict tells whether asynq's error err, a task ID conflict on an
// ID this call made, found the task this call wrote: only this call writes
// that ID, so go-redis resent a write (or a park that writes its task)
// whose first attempt ran. It returns the task as asynq reads it then
// (NewFromRedis); a task gone since, or a failed read, leaves the write
// ambiguous. The Inspector takes no context, so the read is waited for
// until ctx ends, and at most releaseTimeout; a call whose ctx is over, or
// a read that outlasts that, leaves the write ambiguous too.
func (c *Client) ownConflict(ctx context.Context, p prepared, err error) (*asynq.TaskInfo, bool) {
	if !p.made || c.rdb == nil || !errors.Is(err, asynq.ErrTaskIDConflict) || ctx.Err() != nil {
		return nil, false
	}
	type read struct {
		info *asynq.TaskInfo
		err  error
	}
	got := make(chan read, 1)
	go func() {
		info, err := asynq.NewInspectorFromRedisClient(c.rdb).GetTaskInfo(queueOf(p.opts), p.id)
		got <- read{info, err}
	}()
	wait := time.NewTimer(releaseTimeout)
	defer wait.Stop()
	select {
	case r := <-got:
		return r.info, r.err == nil
	case <-ctx.Done():
	case <-wait.C:
	}
	return nil, false
}

// fateOf tells, from asynq's error err and the trace of what was sent,
// whether p's failed write certainly did not happen:
//
//   - No script call was sent (NewFromRedis): asynq writes a task with one
//     script call, and only commands before it (the SADD of a new queue's
//     name) failed, or ctx ended before it left.
//   - asynq.ErrDuplicateTask, and no task with p's ID is in asynq
//     (NewFromRedis): another task holds the asynq.Unique lock, and
//     asynq's script wrote nothing. When go-redis retries a write whose
//     reply was lost, the retry finds the lock its own first attempt took,
//     and the task is there.
//   - Redis refused the script call with OOM, and no task with p's ID is
//     in asynq (NewFromRedis): Redis raises OOM in a script only before
//     its first write, so that attempt wrote nothing, and an earlier
//     attempt go-redis retried would have left the task there.
//   - a Redis error reply (New): asynq keeps one only from the SADD of the
//     queue's name, which goes before the task's write and, failing, stops
//     it. The write itself is asynq's Lua script, and asynq flattens the
//     script's error into text, where a reply such as WRONGTYPE or OOM
//     reads much as a timeout does. Nor would telling them apart be safe:
//     a script that failed part-way has run its earlier writes, and a reply
//     to a retry does not say that the attempt before it wrote nothing.
//
// Everything else may have reached Redis. asynq.ErrTaskIDConflict says the
// task with p's ID is in the queue, written by this call (go-redis retried
// it) or by another with the ID.
func (c *Client) fateOf(p prepared, tr *writeTrace, err error) fate {
	switch {
	case c.rdb != nil && !tr.sent.Load():
		return unwritten
	case c.rdb != nil && (errors.Is(err, asynq.ErrDuplicateTask) || tr.oom.Load()):
		return c.duplicate(p)
	case c.rdb == nil && rediserr.IsReply(err):
		return unwritten
	}
	return maybe
}

// settle ends a call that failed with err, or wrote its task (f is
// written, err nil): it leaves the call's group, gives back the group's
// slot when no task can hold it (see claims), and returns err, marked
// ambiguous when the task may be in the queue. d is the call's decision,
// the zero value when it has none. A release's own failure is appended to
// err as text only (%v): errors.Is must not find admission.ErrUnavailable
// in a failure that happened after admission.
func (c *Client) settle(ctx context.Context, h hold, d admission.Decision, f fate, err error) error {
	slot, release := h.leave(d, f != unwritten)
	if f == maybe {
		err = &ambiguousError{err}
	}
	if !release {
		return err
	}
	defer h.released()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if h.c == nil {
		// An ID Enqueue made: should the release fail, the gate keeps
		// trying, since no other call can hold the ID.
		rctx = freshid.Mark(rctx, slot.ID)
	}
	if rerr := c.gate.Release(rctx, slot); rerr != nil {
		return fmt.Errorf("%w (releasing its slot failed too: %v)", err, rerr)
	}
	return err
}

// withCancel returns err, which ctx's call met, so that it matches
// ctx.Err() and context.Cause(ctx) through errors.Is when ctx is done:
// asynq flattens Redis errors into text, and a call cut short by ctx
// does not carry its cause.
func withCancel(ctx context.Context, err error) error {
	if ctx.Err() != nil && !(errors.Is(err, ctx.Err()) && errors.Is(err, context.Cause(ctx))) {
		return fmt.Errorf("%w: %w", ctxError(ctx), err)
	}
	return err
}

// ctxError is the error of ctx, which is done: it matches both ctx.Err()
// and context.Cause(ctx) through errors.Is.
func ctxError(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return err
	}
	return fmt.Errorf("%w: %w", err, cause)
}
