package enqueue

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
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
// Create a Client with New; the zero value is not usable. A Client is safe
// for concurrent use.
type Client struct {
	asynq *asynq.Client
	gate  *admission.Gate
	newID func() string
	// unbatched: WithBatching(false), read by NewFromRedis.
	unbatched bool
	// pipelined: asynq writes through a pipelined client, which reports
	// a write it never sent (unsentWrite).
	pipelined bool
}

// An Option configures a Client.
type Option interface {
	apply(*Client)
}

type optionFunc func(*Client)

func (f optionFunc) apply(c *Client) { f(c) }

// WithIDFunc sets how task IDs are made for tasks enqueued without an
// asynq.TaskID option. Each ID must be unique across all producers, since
// it is both the asynq task ID and the tenant's log entry. Nil, the default,
// means uuid.NewString.
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

// NewFromRedis returns a Client that admits tasks through g and enqueues
// them with an asynq.Client of its own on rdb, the Redis of the worker
// queues. It is New(asynq.NewClientFromRedisClient(rdb), g, opts...), but
// faster under load: the task writes of concurrent Enqueue calls share
// Redis pipelines (group commit), a few small pipelines in flight at once,
// so that Redis and the producer each do one read and one write for many
// tasks instead of for each. A lone call goes out at once; no timer waits
// for company. Each task is still asynq's own script call, with its own
// reply, and ctx is honoured as in New: a call whose ctx ends before its
// pipeline is sent is never sent, and one that was sent waits for its
// reply, as a plain go-redis call does. Hooks on rdb see these writes as
// pipelines (ProcessPipelineHook), on a context of the pipeline's own,
// which carries the latest deadline among its callers but not their
// values. WithBatching(false) turns it off.
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
	c.pipelined = !c.unbatched
	if c.pipelined {
		rdb = newPipelined(rdb)
	}
	c.asynq = asynq.NewClientFromRedisClient(rdb)
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
	return cl
}

// newClient is a Client on g with opts applied, for New and NewFromRedis to
// give an asynq.Client.
func newClient(g *admission.Gate, opts []Option) *Client {
	if g.Granularity()%time.Second != 0 {
		g = g.AtGranularity(time.Second)
	}
	c := &Client{gate: g, newID: uuid.NewString}
	for _, o := range opts {
		o.apply(c)
	}
	return c
}

// Enqueue admits task for tenant, then enqueues it with asynq:
//
//   - Admitted: the task is enqueued to run now.
//   - Deferred: the task is scheduled (asynq.ProcessAt) for its slot,
//     Decision.At, a whole second. It never becomes pending before it.
//   - Rejected: nothing is enqueued and the error is a *RejectedError,
//     which matches ErrRejected and says when to retry.
//
// The task's ID is the tenant's log entry. It comes from an asynq.TaskID
// option, given to Enqueue or to asynq.NewTask (Enqueue's wins, as in
// asynq); without one, Enqueue makes an ID and passes it on. Enqueueing the
// same ID again while it is in the window takes no second slot: a retry
// after a timeout keeps the original slot, and gets asynq.ErrTaskIDConflict
// if the first attempt did reach the queue. asynq task IDs are unique per
// queue, across tenants, while each tenant's log is its own: where tenants
// pick IDs (say, from idempotency keys), put the tenant in the ID.
//
// Treat asynq.ErrTaskIDConflict as "the task is in the queue", even from a
// single call with an ID of its own: go-redis retries a command that timed
// out, and when the attempt that timed out did reach Redis, the retry finds
// the task that attempt wrote.
//
// A task with its own asynq.ProcessAt or asynq.ProcessIn runs at the later
// of that time and its slot. The tenant is stored in the task's headers
// under TenantHeader, next to the task's own headers and options; the task
// itself is not modified. Options that asynq would refuse (a blank queue
// name, task ID or group, a Unique TTL under a second) are refused before
// admission.
//
// When ctx is done after admission, Enqueue does not call asynq; it
// releases the slot it took and returns an error that matches ctx.Err()
// and context.Cause(ctx). If asynq fails to enqueue an admitted task,
// Enqueue returns asynq's error, wrapped (errors.Is works; when ctx is
// done, the error matches ctx.Err() and context.Cause(ctx) as well), and
// releases the slot only when the failure shows that nothing was written:
// asynq.ErrDuplicateTask (another task holds the asynq.Unique lock), a
// Redis error reply that stopped asynq before its write, or (with
// NewFromRedis) ctx done while the write still waited for its pipeline,
// which then never sends it. Any other failure
// (a timeout, a network error, ctx done while asynq waited for Redis) is
// ambiguous: the write may have reached Redis and the task may be in the
// queue, so the slot stays with it, and a retry with the same ID finds it
// (Decision.Existing). Should the task not be there, its slot idles until
// the window passes: at most one slot for each such failure, never a task
// past the quota. A slot this call did not take (Decision.Existing) is
// never released, nor one whose enqueue got asynq.ErrTaskIDConflict: it
// belongs to a task already in asynq, or to another attempt at the same ID.
// When the release itself fails, its error is appended as text only, so
// that errors.Is finds asynq's error and not the gate's.
//
// The Decision is returned with any error from asynq, for logging; it is the
// zero value when the gate was not asked or failed.
func (c *Client) Enqueue(ctx context.Context, tenant string, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, admission.Decision, error) {
	p, err := c.prepare(tenant, task, opts)
	if err != nil {
		return nil, admission.Decision{}, err
	}
	ds, err := c.gate.AdmitTasks(ctx, tenant, []admission.Ref{p.ref()})
	if err != nil {
		return nil, admission.Decision{}, err
	}
	info, err := c.enqueue(ctx, p, ds[0])
	return info, ds[0], err
}

// Result is the outcome of one task of EnqueueBatch.
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

// EnqueueBatch admits tasks for tenant in one gate round trip, then
// enqueues each as Enqueue does, in order, and returns one Result per task,
// in the order of tasks. opts apply to every task, so they must not hold an
// asynq.TaskID.
//
// Slots never go backwards through the batch, and once one task is rejected
// so is every task after it. A task that is invalid (nil, or with an empty
// type or ID) gets an error in its Result and is not admitted.
//
// The error is non-nil, and the results nil, only when nothing was admitted:
// the tenant is invalid, opts hold a TaskID, or the gate failed (say, Redis
// is unavailable). Otherwise every task's fate is in its Result.
func (c *Client) EnqueueBatch(ctx context.Context, tenant string, tasks []*asynq.Task, opts ...asynq.Option) ([]Result, error) {
	if err := admission.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	if hasTaskID(opts) {
		return nil, errors.New("enqueue: EnqueueBatch options hold an asynq.TaskID, which would give every task the same ID; set it on each task instead")
	}
	rs := make([]Result, len(tasks))
	ps := make([]prepared, 0, len(tasks))
	refs := make([]admission.Ref, 0, len(tasks))
	for i, t := range tasks {
		p, err := c.prepare(tenant, t, opts)
		if err != nil {
			rs[i].Err = fmt.Errorf("task %d: %w", i, err)
			continue
		}
		p.index = i
		ps = append(ps, p)
		refs = append(refs, p.ref())
	}
	if len(refs) == 0 {
		return rs, nil
	}
	ds, err := c.gate.AdmitTasks(ctx, tenant, refs)
	if err != nil {
		return nil, err
	}
	if len(ds) != len(ps) {
		return nil, fmt.Errorf("enqueue: the gate returned %d decisions for %d tasks", len(ds), len(ps))
	}
	for j, p := range ps {
		r := &rs[p.index]
		r.Decision = ds[j]
		r.Info, r.Err = c.enqueue(ctx, p, ds[j])
	}
	return rs, nil
}

// prepared is a task ready to be admitted and enqueued.
type prepared struct {
	tenant string
	task   *asynq.Task // the caller's task
	// opts are every option the task is enqueued with, in the order asynq
	// applies them: the task's own, the caller's Enqueue options, then the
	// ID if made here. There is room for one more, the slot of a deferred
	// task. The enqueued task carries them all, so that asynq, which
	// appends Enqueue's options to the task's, has nothing to copy.
	opts  []asynq.Option
	sched scheduling
	id    string
	index int // position in an EnqueueBatch
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
	all := make([]asynq.Option, 0, len(topts)+len(opts)+2)
	all = append(append(all, topts...), opts...)
	p := prepared{tenant: tenant, task: task, sched: s, id: s.id}
	if s.id == "" {
		p.id = c.newID()
		// Appended, not prepended: asynq applies the last TaskID, and
		// neither the task's nor the caller's options hold one.
		all = append(all, asynq.TaskID(p.id))
	}
	if isBlank(p.id) {
		return prepared{}, fmt.Errorf("enqueue: task ID %q is empty", p.id)
	}
	p.opts = all
	return p, nil
}

// enqueue acts on the gate's decision d for p.
func (c *Client) enqueue(ctx context.Context, p prepared, d admission.Decision) (*asynq.TaskInfo, error) {
	if d.Outcome == admission.Rejected {
		return nil, &RejectedError{Decision: d}
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
	if p.sched.at.After(slot) && d.Outcome != admission.Parked {
		slot = p.sched.at // the caller's own later time; asynq already has it
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
	if ctx.Err() != nil {
		// Done after admission: asynq is not called, so nothing was
		// written and the slot can go back.
		return nil, c.release(ctx, d, c.unpark(ctx, p, d, fmt.Errorf("enqueue: tenant %q, task %q: not enqueued: %w", p.tenant, p.id, ctxError(ctx))))
	}
	actx, unsent := ctx, (*unsentWrite)(nil)
	if c.pipelined {
		unsent = new(unsentWrite)
		actx = context.WithValue(ctx, unsentKey{}, unsent)
	}
	info, err := c.asynq.EnqueueContext(actx, task) // the task carries every option
	if err == nil {
		return info, nil
	}
	// A write that its pipeline never sent wrote nothing.
	refused := notWritten(err) || unsent != nil && unsent.Load()
	if ctx.Err() != nil && !(errors.Is(err, ctx.Err()) && errors.Is(err, context.Cause(ctx))) {
		// asynq flattens Redis errors into text; keep the caller's
		// cancellation visible to errors.Is.
		err = fmt.Errorf("%w: %w", ctxError(ctx), err)
	}
	err = fmt.Errorf("enqueue: tenant %q, task %q: %w", p.tenant, p.id, err)
	if !refused {
		// A timeout, a network error, a ctx done while asynq waited: the
		// write may have reached Redis, which then runs it, so the task may
		// be in the queue, and its slot stays with it. Releasing it would
		// let the tenant's next task past the quota. At worst the slot
		// idles until the window passes. ErrTaskIDConflict lands here too:
		// the task with this ID is in the queue and owns the slot.
		return nil, err
	}
	return nil, c.release(ctx, d, c.unpark(ctx, p, d, err))
}

// notWritten reports whether asynq's error err says for certain that the
// task was not written, so that its slot can be released:
//
//   - asynq.ErrDuplicateTask: another task holds the Unique lock, and
//     asynq's script wrote nothing. One case slips through: go-redis
//     retries a script call that timed out, and if the attempt that timed
//     out did run, it took the lock for this very task, so the retry finds
//     the lock held and reports a duplicate of the task it enqueued. Only
//     the lock's value (the ID that holds it) tells the two apart, and the
//     Client has no connection of its own to asynq's Redis to read it.
//     Releasing a duplicate's slot is what Unique callers need, or every
//     refused duplicate would idle a slot for a window; the slip needs a
//     timeout whose write landed, on a Unique task, and costs one slot.
//   - a Redis error reply (a redis.Error that is not a connection or
//     timeout problem). asynq v0.26.0 keeps one only from the SADD of the
//     queue's name, which goes before the task's write and, failing, stops
//     it. The write itself is asynq's Lua script, and asynq flattens the
//     script's error into text ("redis eval error: ..."), where a reply such
//     as WRONGTYPE or OOM reads much as a timeout does; telling them apart
//     would mean parsing go-redis's and Redis's wording. Nor would that be
//     safe: a script that failed part-way has run its earlier writes (Redis
//     does not roll a script back), and a reply to a retry does not say that
//     the attempt which timed out before it wrote nothing. So a failed
//     script keeps its slot.
//
// Everything else may have reached Redis.
func notWritten(err error) bool {
	if errors.Is(err, asynq.ErrDuplicateTask) {
		return true
	}
	var rerr redis.Error
	var nerr net.Error
	return errors.As(err, &rerr) && !errors.As(err, &nerr) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// release gives back the slot d took, for a task that is certainly not in
// the queue, and returns err, the reason, with the Release's own error
// appended when it fails. That error is text only (%v): errors.Is must not
// find admission.ErrUnavailable in a failure that happened after admission.
// It keeps a slot this call did not take (Decision.Existing): that slot
// belongs to an earlier attempt at the same ID, which may have enqueued it.
func (c *Client) release(ctx context.Context, d admission.Decision, err error) error {
	if d.Existing {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if rerr := c.gate.Release(rctx, d); rerr != nil {
		return fmt.Errorf("%w (releasing its slot failed too: %v)", err, rerr)
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
