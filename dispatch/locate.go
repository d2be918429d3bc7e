package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/admitq/admitq/dispatch/internal/rule"
)

// ErrTaskNotFound is returned by Locate when neither asynq nor the
// dispatcher holds the task in the queue.
var ErrTaskNotFound = errors.New("dispatch: task not found")

// Where is the part of the dispatcher that holds a task.
type Where int

const (
	// NotHeld: the dispatcher holds nothing of the task; asynq alone has
	// it (the queue is not dispatched for its tenant, or the task's place
	// was freed when it finished).
	NotHeld Where = iota
	// Waiting: the task waits in one of its tenant's flows (its line, for
	// a task of priority 0 without keys), parked in asynq's scheduled set
	// until ParkedUntil.
	Waiting
	// Limbo: the task's entry is set aside, out of its tenant's line: its
	// own start time is ahead, or asynq did not hold the task at its turn.
	Limbo
	// InFlight: the dispatcher let the task in; it counts against its
	// tenant's cap until asynq is done with it.
	InFlight
)

// String returns "not held", "waiting", "limbo" or "in flight".
func (w Where) String() string {
	switch w {
	case Waiting:
		return "waiting"
	case Limbo:
		return "limbo"
	case InFlight:
		return "in flight"
	}
	return "not held"
}

// Reason is what holds a waiting task, or one in limbo.
type Reason int

const (
	// ReasonNone: nothing in the reading holds it: the queue's next
	// dispatch turn lets it in (or, in limbo, puts it back at the head of
	// its tenant's line).
	ReasonNone Reason = iota
	// ReasonUnserved: no live worker with a gate serves the queue, so
	// nothing moves until one does.
	ReasonUnserved
	// ReasonPaused: its tenant is paused (Quota.Paused, as the dispatcher
	// last stored it).
	ReasonPaused
	// ReasonCap: its tenant is at its cap (Place.InFlight of Place.Cap).
	ReasonCap
	// ReasonRate: its tenant sleeps until Place.Until, the gate's next
	// slot under its rate (or a second after an admission that failed).
	ReasonRate
	// ReasonFull: the fair queue is full (Place.Room is 0 or less): the
	// next grant waits for one of its tasks to end.
	ReasonFull
	// ReasonTurn: other tasks go first: earlier ones of its flow
	// (Place.Position > 1), the heads of its tenant's flows ordered before
	// its own (Place.FlowsAhead), or tenants with earlier start tags in a
	// fair queue (Place.TenantsAhead).
	ReasonTurn
	// ReasonLater: in limbo until its own start time, Place.NotBefore.
	ReasonLater
	// ReasonMissing: in limbo because asynq does not hold the task: its
	// producer has not written it yet, or it was deleted. The dispatcher
	// looks again at Place.Until, and drops the entry an hour after it was
	// parked.
	ReasonMissing
	// ReasonKeyPaused: a concurrency key the task carries, Place.Key, is
	// paused (its Quota.Paused, as the dispatcher last stored it).
	ReasonKeyPaused
	// ReasonKeyHeld: a downstream throttle (worker.ThrottledKey) holds
	// Place.Key until Place.Until.
	ReasonKeyHeld
	// ReasonKeyCap: Place.Key is at its cap across the queue's tenants
	// (its KeyStats in Place.Keys say how many of how many).
	ReasonKeyCap
)

// String returns the reason's name, e.g. "cap".
func (r Reason) String() string {
	switch r {
	case ReasonUnserved:
		return "unserved"
	case ReasonPaused:
		return "paused"
	case ReasonCap:
		return "cap"
	case ReasonRate:
		return "rate"
	case ReasonFull:
		return "full"
	case ReasonTurn:
		return "turn"
	case ReasonLater:
		return "later"
	case ReasonMissing:
		return "missing"
	case ReasonKeyPaused:
		return "key paused"
	case ReasonKeyHeld:
		return "key held"
	case ReasonKeyCap:
		return "key cap"
	}
	return "none"
}

// Stage is where a task in flight is on its way in.
type Stage int

const (
	// StageGranted: a dispatch turn granted it; a worker is admitting it and
	// moving it into asynq's pending list.
	StageGranted Stage = iota + 1
	// StageStraight: it went straight in at park; its producer is writing it.
	StageStraight
	// StageQueued: asynq has it in its hands (pending, active, or to retry).
	StageQueued
)

// String returns "granted", "straight" or "queued".
func (s Stage) String() string {
	switch s {
	case StageGranted:
		return "granted"
	case StageStraight:
		return "straight"
	case StageQueued:
		return "queued"
	}
	return ""
}

// Place is where a task is in its queue and why, as Locate read it in one
// moment. Fields that do not apply are zero.
type Place struct {
	Queue, TaskID string
	// Now is the Redis time of the reading.
	Now time.Time
	// TaskState is asynq's state of the task ("pending", "active",
	// "scheduled", "retry", "archived", "completed", "aggregating"), ""
	// when asynq does not hold it. Parked reports that asynq keeps it
	// scheduled at ParkedUntil, for the dispatcher to move in.
	TaskState string
	Parked    bool
	// Tenant is the task's tenant: from the dispatcher's record, else
	// from the task's tenant header; "" when neither says.
	Tenant string
	Where  Where
	// Reason is what holds a Waiting or Limbo task; Until is when a
	// tenant asleep on its rate wakes (ReasonRate), when a throttle lets
	// Key go (ReasonKeyHeld), or when the dispatcher looks again at a task
	// in limbo.
	Reason Reason
	Until  time.Time
	// Priority and Keys are the task's, as the dispatcher holds it: its
	// enqueue.Priority (0 for a task in flight that the dispatcher did not
	// let in itself, such as one run from outside) and its concurrency
	// keys, by name, each with its record in the queue now. Key is the
	// one of them that holds the task (ReasonKeyPaused, ReasonKeyHeld,
	// ReasonKeyCap): a paused one before one a throttle holds, before one
	// at its cap; "" when none does.
	Priority int
	Keys     []KeyStats
	Key      string
	// Position is the task's place in its flow (its tenant's waiting tasks
	// of its priority and keys, first in, first out), from 1, and
	// FlowWaiting how many tasks wait in that flow; TenantWaiting is how
	// many of the tenant's tasks wait, in all its flows. FlowsAhead is how
	// many of the tenant's flows are ordered before the task's (by
	// priority, then the age of their first task), whose first tasks go
	// before it while their keys let them. A tenant whose tasks all carry
	// no keys and priority 0 has one flow, its line.
	Position, FlowWaiting, TenantWaiting, FlowsAhead int
	// TenantsAhead is how many tenants' next tasks go before its tenant's
	// in a fair queue (those with an earlier start tag); 0 when its tenant
	// is not among those that may go in now.
	TenantsAhead int
	// InFlight is how many of the tenant's tasks are in flight in the
	// queue; Cap is the tenant's MaxInFlight as the dispatcher last
	// stored it (0: none), which a quota change reaches at the tenant's
	// next park or finish.
	InFlight, Cap int
	// Paused reports that the dispatcher holds the tenant's waiting tasks
	// for its Quota.Paused, as it last stored it.
	Paused bool
	// Stage and Since tell where an InFlight task is and since when.
	Stage Stage
	Since time.Time
	// NotBefore is the task's own start time, zero for none.
	NotBefore time.Time
	// Served reports that a live worker with a gate serves the queue, and
	// Fair that one of them is fair. Room is how many more tasks the fair
	// queue takes now (its live gate workers' concurrency and half as
	// much again, at least 2, less the tasks pending, active, granted or
	// being written); -1 in a queue that is not fair, where space is not
	// limited.
	Served, Fair bool
	Room         int
}

// Locate reads where task taskID is in queue and what it waits on: asynq's
// state of it and, when the dispatcher holds it, its tenant, its flow, its
// place in that flow and what holds it (its tenant, or one of its
// concurrency keys), or its stage in flight. It costs a few round trips,
// plus one page read per thousand of the tenant's flows when it has flows
// besides its line, and one per thousand tasks ahead of it in the flows of
// its keys (those of its priority and of the others); a task in limbo
// costs a scan of the queue's limbo. It returns an error wrapping
// ErrTaskNotFound when neither asynq nor the dispatcher holds the task.
func (d *Dispatcher) Locate(ctx context.Context, queue, taskID string) (Place, error) {
	if err := d.checkPrefix(); err != nil {
		return Place{}, err
	}
	k := d.keysFor(queue)
	taskKey := k.taskPrefix + taskID
	var (
		now                  *redis.TimeCmd
		task                 *redis.SliceCmd
		score                *redis.FloatCmd
		flight               *redis.StringCmd
		members              *redis.ZSliceCmd
		npend, nact, ngrants *redis.IntCmd
		nfresh               *redis.IntCmd
	)
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		task = p.HMGet(ctx, taskKey, "state", "msg")
		score = p.ZScore(ctx, k.scheduled, taskID)
		flight = p.HGet(ctx, k.run, taskID)
		members = p.ZRangeWithScores(ctx, k.workers, 0, -1)
		npend, nact = p.LLen(ctx, k.pending), p.LLen(ctx, k.active)
		ngrants, nfresh = p.HLen(ctx, k.grants), p.ZCard(ctx, k.fresh)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Place{}, fmt.Errorf("dispatch: locating task %q in queue %q: %w", taskID, queue, err)
	}
	pl := Place{Queue: queue, TaskID: taskID, Now: now.Val(), Room: -1}
	h := task.Val()
	pl.TaskState, _ = h[0].(string)
	msg, _ := h[1].(string)
	pl.Parked = pl.TaskState == "scheduled" && score.Err() == nil && int64(score.Val()) == ParkedUntil.Unix()
	concurrency := 0
	for _, z := range members.Val() {
		// A lapsed member still makes the queue fair for its restart grace.
		w, ok := parseWorkerMember(z.Member.(string))
		live, recent := w.state(int64(z.Score), pl.Now.UnixMicro())
		if !ok || !recent {
			continue
		}
		pl.Fair = pl.Fair || w.fair
		if live {
			pl.Served = true
			concurrency += w.concurrency
		}
	}
	if pl.Fair {
		pl.Room = rule.Room(concurrency, int(npend.Val()+nact.Val()+ngrants.Val()+nfresh.Val()))
	}

	if r := flight.Val(); r != "" {
		if e, ok := parseRunEntry(r); ok {
			pl.Where, pl.Tenant = InFlight, e.tenant
			pl.Stage = map[string]Stage{"g": StageGranted, "f": StageStraight, "p": StageQueued}[e.state]
			if pl.Stage == StageStraight && pl.TaskState != "" {
				pl.Stage = StageQueued // its producer wrote it
			}
			if e.since > 0 {
				pl.Since = time.UnixMicro(e.since)
			}
			if _, _, err := d.readTenant(ctx, k, &pl); err != nil {
				return pl, err
			}
			var keys []string
			pl.Priority, keys = rule.ParseFlow(e.flow)
			return pl, d.readKeyStates(ctx, k, &pl, keys)
		}
	}
	pl.Tenant = taskHeader([]byte(msg), tenantHeader)
	if pl.Tenant != "" {
		head, others, err := d.readTenant(ctx, k, &pl)
		if err != nil {
			return pl, err
		}
		found, err := d.findInFlows(ctx, k, &pl, head, others, taskKeys([]byte(msg)))
		if err != nil || found {
			return pl, err
		}
	}
	found, err := d.findInLimbo(ctx, k, &pl)
	switch {
	case err != nil:
		return pl, err
	case !found && pl.TaskState == "":
		return pl, fmt.Errorf("%w: %q in queue %q: neither asynq nor the dispatcher holds it", ErrTaskNotFound, taskID, queue)
	}
	return pl, nil
}

// tenantHeader is enqueue.TenantHeader, which enqueue (importing this
// package) stamps on every task it sends.
const tenantHeader = "admitq-tenant"

// keysHeader is enqueue.KeysHeader: a task's concurrency keys, sorted,
// each once, joined by newlines.
const keysHeader = "admitq-keys"

// taskFlow is the flow a run-from-outside task counts in: its keys (from
// its header msg), at priority 0 (a run entry's flow only counts keys).
func taskFlow(msg []byte) string {
	return rule.FlowID(0, taskKeys(msg))
}

// taskKeys are the concurrency keys in the header of task message msg,
// sorted, each once; nil for none.
func taskKeys(msg []byte) []string {
	if h := taskHeader(msg, keysHeader); h != "" {
		return strings.Split(h, "\n")
	}
	return nil
}

// readTenant reads pl.Tenant's record in queue: its tasks in flight, its
// stored cap, and how many of its tasks wait in all its flows. It returns
// the first entry of the tenant's line (flow "0"), "" when that is empty,
// and how many of its tasks wait in its other flows.
func (d *Dispatcher) readTenant(ctx context.Context, k queueKeys, pl *Place) (head string, others int, err error) {
	var rec *redis.SliceCmd
	var waiting *redis.IntCmd
	var first *redis.StringCmd
	_, err = d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		rec = p.HMGet(ctx, k.tenantKey(pl.Tenant), "n", "cap", "paused", "wk")
		waiting = p.LLen(ctx, k.waitingKey(pl.Tenant))
		first = p.LIndex(ctx, k.waitingKey(pl.Tenant), 0)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, fmt.Errorf("dispatch: reading tenant %q in queue %q: %w", pl.Tenant, pl.Queue, err)
	}
	h := rec.Val()
	pl.InFlight, pl.Cap = storedInt(h[0]), storedInt(h[1])
	pl.Paused = storedInt(h[2]) == 1
	others = storedInt(h[3])
	pl.TenantWaiting = int(waiting.Val()) + others
	return first.Val(), others, nil
}

// readKeyStates reads keys' records in pl's queue, and whether a throttle
// holds each, into pl.Keys: one round trip for at most MaxKeys keys.
func (d *Dispatcher) readKeyStates(ctx context.Context, k queueKeys, pl *Place, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	hashes := make([]*redis.SliceCmd, len(keys))
	held := make([]*redis.FloatCmd, len(keys))
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, K := range keys {
			hashes[i] = p.HMGet(ctx, k.keyKey(K), "n", "cap", "paused", "w")
			held[i] = p.ZScore(ctx, k.ksleep, K)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("dispatch: reading the keys of task %q in queue %q: %w", pl.TaskID, pl.Queue, err)
	}
	pl.Keys = make([]KeyStats, len(keys))
	for i, K := range keys {
		h := hashes[i].Val()
		ks := KeyStats{Key: K, InFlight: storedInt(h[0]), Cap: storedInt(h[1]), Paused: storedInt(h[2]) == 1, Waiting: storedInt(h[3])}
		ks.AtCap = ks.Cap > 0 && ks.InFlight >= ks.Cap
		if us, err := held[i].Result(); err == nil && int64(us) > pl.Now.UnixMicro() {
			ks.Held, ks.HeldUntil = true, time.UnixMicro(int64(us))
		}
		pl.Keys[i] = ks
	}
	return nil
}

// keyReason is what holds a task carrying pl.Keys, as far as its keys
// go: a paused key first, then one a throttle holds, then one at its cap,
// the first by name of each. It sets pl.Key, and pl.Until for a held key.
func keyReason(pl *Place) Reason {
	for _, r := range []Reason{ReasonKeyPaused, ReasonKeyHeld, ReasonKeyCap} {
		for _, ks := range pl.Keys {
			if r == ReasonKeyPaused && ks.Paused || r == ReasonKeyHeld && ks.Held || r == ReasonKeyCap && ks.AtCap {
				pl.Key = ks.Key
				if r == ReasonKeyHeld {
					pl.Until = ks.HeldUntil
				}
				return r
			}
		}
	}
	return ReasonNone
}

// linePage is how many entries of a flow findInFlows reads a call, and how
// many of a tenant's flows.
const linePage = 1000

// tenantFlows lists pl.Tenant's flows with tasks waiting in the order its
// tasks go (as fair.lua's flowsOf does: higher priority, then older first
// task, then name), "0" among them when its line's first entry is head.
// It reads the tenant's set of flows a page at a time.
func (d *Dispatcher) tenantFlows(ctx context.Context, k queueKeys, pl *Place, head string) ([]string, error) {
	var others []string
	for start := int64(0); ; start += linePage {
		page, err := d.rdb.ZRange(ctx, k.flowsKey(pl.Tenant), start, start+linePage-1).Result()
		if err != nil {
			return nil, fmt.Errorf("dispatch: reading tenant %q's flows in queue %q: %w", pl.Tenant, pl.Queue, err)
		}
		others = append(others, page...)
		if len(page) < linePage {
			break
		}
	}
	var flows []string
	dm := ""
	if head != "" {
		if e, err := parseWaitingEntry(head); err == nil {
			dm = flowMember(e.parked, "0")
		}
	}
	for _, m := range others {
		_, f, ok := strings.Cut(m, "|")
		if !ok {
			continue
		}
		p, _ := rule.ParseFlow(f)
		if head != "" && (p < 0 || (p == 0 && m > dm)) {
			flows, head = append(flows, "0"), ""
		}
		flows = append(flows, f)
	}
	if head != "" {
		flows = append(flows, "0")
	}
	return flows, nil
}

// flowMember is flow f's member in its tenant's set of flows when its
// first task was parked at µs at: at in 16 digits, "|", f.
func flowMember(at int64, f string) string {
	s := strconv.FormatInt(at, 10)
	if len(s) < 16 {
		s = strings.Repeat("0", 16-len(s)) + s
	}
	return s + "|" + f
}

// findInFlows looks for pl's task among its tenant's waiting tasks: in
// the flows of its keys (those of every priority), a page at a time, in
// the order the tenant's tasks go. head is the first entry of the
// tenant's line, others how many tasks wait in its other flows (its
// record's wk). When the task is there, it reads what holds it.
func (d *Dispatcher) findInFlows(ctx context.Context, k queueKeys, pl *Place, head string, others int, keys []string) (bool, error) {
	flows := []string{"0"}
	if others > 0 {
		var err error
		if flows, err = d.tenantFlows(ctx, k, pl, head); err != nil {
			return false, err
		}
	}
	for i, f := range flows {
		prio, fk := rule.ParseFlow(f)
		if !slices.Equal(fk, keys) {
			continue
		}
		pos, e, err := d.findInLine(ctx, k, pl, f)
		if err != nil {
			return false, err
		}
		if pos > 0 {
			pl.Where, pl.Position, pl.NotBefore = Waiting, pos, e.notBeforeTime()
			pl.Priority, pl.FlowsAhead = prio, i
			return true, d.readHold(ctx, k, pl, f, keys)
		}
	}
	return false, nil
}

// findInLine returns the place, from 1, of pl's task in its tenant's flow
// f, and its entry; 0 when it is not there.
func (d *Dispatcher) findInLine(ctx context.Context, k queueKeys, pl *Place, f string) (int, waitingEntry, error) {
	line := k.flowKey(pl.Tenant, f)
	for start := int64(0); ; start += linePage {
		page, err := d.rdb.LRange(ctx, line, start, start+linePage-1).Result()
		if err != nil {
			return 0, waitingEntry{}, fmt.Errorf("dispatch: reading tenant %q's line in queue %q: %w", pl.Tenant, pl.Queue, err)
		}
		for i, s := range page {
			if e, err := parseWaitingEntry(s); err == nil && e.id == pl.TaskID {
				return int(start) + i + 1, e, nil
			}
		}
		if len(page) < linePage {
			return 0, waitingEntry{}, nil
		}
	}
}

// readHold reads what holds pl's task, waiting in its tenant's flow f with
// keys: the length of its flow, its tenant's sleep and rank among the
// tenants that may go in, and its keys' records; and sets pl.Reason.
func (d *Dispatcher) readHold(ctx context.Context, k queueKeys, pl *Place, f string, keys []string) error {
	var wake *redis.FloatCmd
	var rank, n *redis.IntCmd
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		wake = p.ZScore(ctx, k.sleep, pl.Tenant)
		rank = p.ZRank(ctx, k.vt, pl.Tenant)
		n = p.LLen(ctx, k.flowKey(pl.Tenant, f))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("dispatch: reading tenant %q in queue %q: %w", pl.Tenant, pl.Queue, err)
	}
	pl.FlowWaiting = int(n.Val())
	if rank.Err() == nil {
		pl.TenantsAhead = int(rank.Val())
	}
	if err := d.readKeyStates(ctx, k, pl, keys); err != nil {
		return err
	}
	switch {
	case !pl.Served:
		pl.Reason = ReasonUnserved
	case pl.Paused:
		pl.Reason = ReasonPaused
	case pl.Cap > 0 && pl.InFlight >= pl.Cap:
		pl.Reason = ReasonCap
	case wake.Err() == nil:
		pl.Reason, pl.Until = ReasonRate, time.UnixMicro(int64(wake.Val()))
	}
	if pl.Reason != ReasonNone {
		return nil
	}
	if r := keyReason(pl); r != ReasonNone {
		pl.Reason = r
		return nil
	}
	switch {
	case pl.Fair && pl.Room <= 0:
		pl.Reason = ReasonFull
	case pl.Position > 1 || pl.FlowsAhead > 0 || pl.TenantsAhead > 0:
		pl.Reason = ReasonTurn
	}
	return nil
}

// limboScan is how many limbo members findInLimbo asks Redis to look at a
// SCAN call.
const limboScan = 1000

// findInLimbo looks for pl's task among the queue's entries in limbo.
func (d *Dispatcher) findInLimbo(ctx context.Context, k queueKeys, pl *Place) (bool, error) {
	// A member is "<tenant>\n<waiting entry>", and an entry ends in its
	// task ID.
	match := "*|" + globEscape(pl.TaskID)
	if pl.Tenant != "" {
		match = globEscape(pl.Tenant) + "\n" + match
	}
	var cursor uint64
	for {
		keys, next, err := d.rdb.ZScan(ctx, k.limbo, cursor, match, limboScan).Result()
		if err != nil {
			return false, fmt.Errorf("dispatch: reading queue %q's limbo: %w", pl.Queue, err)
		}
		for i := 0; i+1 < len(keys); i += 2 {
			tenant, f, e, ok := parseLimboMember(keys[i])
			if !ok || e.id != pl.TaskID {
				continue
			}
			nb := e.notBeforeTime()
			at, _ := strconv.ParseFloat(keys[i+1], 64)
			pl.Where, pl.NotBefore, pl.Until = Limbo, nb, time.UnixMicro(int64(at))
			var fk []string
			pl.Priority, fk = rule.ParseFlow(f)
			switch {
			case pl.TaskState == "":
				pl.Reason = ReasonMissing
			case nb.After(pl.Now):
				pl.Reason = ReasonLater
			}
			if pl.Tenant == "" {
				pl.Tenant = tenant
				if _, _, err := d.readTenant(ctx, k, pl); err != nil {
					return true, err
				}
			}
			return true, d.readKeyStates(ctx, k, pl, fk)
		}
		if cursor = next; cursor == 0 {
			return false, nil
		}
	}
}

// parseLimboMember splits a member of a queue's limbo (see fair.lua's
// toLimbo: "<tenant>\n<entry>" for flow "0", else
// "<tenant>\n\t<flow>\n<entry>") into its tenant, flow and entry.
func parseLimboMember(m string) (tenant, flow string, e waitingEntry, ok bool) {
	tenant, rest, ok := strings.Cut(m, "\n")
	if !ok {
		return "", "", waitingEntry{}, false
	}
	flow = "0"
	if f, ok := strings.CutPrefix(rest, "\t"); ok {
		if flow, rest, ok = strings.Cut(f, "\n"); !ok {
			return "", "", waitingEntry{}, false
		}
	}
	e, err := parseWaitingEntry(rest)
	return tenant, flow, e, err == nil
}

// storedInt reads a number the scripts stored, 0 when missing.
func storedInt(v any) int {
	s, _ := v.(string)
	f, _ := strconv.ParseFloat(s, 64)
	return int(f)
}

// globEscape escapes s for a Redis MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// taskDeadline reads the asynq.Deadline of task message msg (field 9,
// unix seconds) in µs: 0 when it has none, or msg does not parse.
func taskDeadline(msg []byte) int64 {
	const deadline = 9
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return 0
		}
		msg = msg[n:]
		if num == deadline && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(msg)
			if n < 0 || int64(v) <= 0 || int64(v) > math.MaxInt64/1_000_000 {
				return 0
			}
			return int64(v) * 1_000_000
		}
		if n = protowire.ConsumeFieldValue(num, typ, msg); n < 0 {
			return 0
		}
		msg = msg[n:]
	}
	return 0
}

// taskHeader returns header name of an asynq task message (asynq's
// TaskMessage protobuf, whose field 15 is its headers map), or "".
func taskHeader(msg []byte, name string) string {
	const headers = 15
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return ""
		}
		msg = msg[n:]
		if num != headers || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, msg); n < 0 {
				return ""
			}
			msg = msg[n:]
			continue
		}
		entry, n := protowire.ConsumeBytes(msg)
		if n < 0 {
			return ""
		}
		msg = msg[n:]
		if key, value := mapEntry(entry); key == name {
			return value
		}
	}
	return ""
}

// mapEntry reads a protobuf map<string, string> entry: key 1, value 2.
func mapEntry(b []byte) (key, value string) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", ""
		}
		b = b[n:]
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return "", ""
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", ""
		}
		b = b[n:]
		switch num {
		case 1:
			key = string(v)
		case 2:
			value = string(v)
		}
	}
	return key, value
}

// Why says in a few words what holds the task, or where it is in flight,
// e.g. "the tenant is at its cap (2/2 in flight): it goes in when one of
// the tenant's running tasks ends".
func (p Place) Why() string {
	switch p.Where {
	case InFlight:
		switch p.Stage {
		case StageGranted:
			return "in flight: granted, being moved into the queue"
		case StageStraight:
			return "in flight: went straight in, being written by its producer"
		}
		return fmt.Sprintf("in flight: in asynq's hands (%s), counted against the tenant's cap", cmp.Or(p.TaskState, "state unknown"))
	case NotHeld:
		if p.Parked {
			return "not held by the dispatcher, though asynq keeps it parked for it: no turn of the dispatcher will move it in"
		}
		return "not held by the dispatcher: asynq alone has it"
	case Limbo:
		if p.Reason == ReasonNone {
			return fmt.Sprintf("in limbo: asynq holds the task again, and it returns to the head of its tenant's line at %s", p.Until.Local().Format("15:04:05.000"))
		}
	}
	switch p.Reason {
	case ReasonUnserved:
		return "no worker with a gate serves the queue: nothing moves until one does"
	case ReasonPaused:
		return "the tenant is paused: it goes in, in order, once the tenant is resumed"
	case ReasonCap:
		return fmt.Sprintf("the tenant is at its cap (%d/%d in flight): it goes in when one of the tenant's running tasks ends", p.InFlight, p.Cap)
	case ReasonRate:
		return fmt.Sprintf("the tenant is held by its rate until %s", p.Until.Local().Format("15:04:05.000"))
	case ReasonFull:
		return "waits its turn in a fair queue: the queue is full, and the next grant follows a task that ends"
	case ReasonTurn:
		if p.FlowsAhead > 0 {
			return fmt.Sprintf("waits its turn in a fair queue: %d earlier tasks of its flow (priority %d), the first tasks of %d of the tenant's flows ordered before it, and %d other tenants go first",
				p.Position-1, p.Priority, p.FlowsAhead, p.TenantsAhead)
		}
		return fmt.Sprintf("waits its turn in a fair queue: %d of the tenant's tasks and %d other tenants go first", p.Position-1, p.TenantsAhead)
	case ReasonKeyPaused:
		return fmt.Sprintf("its key %q is paused: it goes in, in order, once the key is resumed", p.Key)
	case ReasonKeyHeld:
		return fmt.Sprintf("its key %q is held by a downstream throttle (worker.ThrottledKey) until %s", p.Key, p.Until.Local().Format("15:04:05.000"))
	case ReasonKeyCap:
		in, c := 0, 0
		for _, ks := range p.Keys {
			if ks.Key == p.Key {
				in, c = ks.InFlight, ks.Cap
			}
		}
		return fmt.Sprintf("its key %q is at its cap (%d/%d in flight across tenants): it goes in when one of the key's running tasks ends", p.Key, in, c)
	case ReasonLater:
		return fmt.Sprintf("waits aside until its own start time, %s", p.NotBefore.Local().Format(time.RFC3339))
	case ReasonMissing:
		return fmt.Sprintf("in limbo: asynq does not hold the task (its producer has not written it yet, or it was deleted); looked for again at %s", p.Until.Local().Format("15:04:05.000"))
	}
	return "goes in at the queue's next dispatch turn"
}

// ParkedWhy says why a task that Park told to wait waits, from what
// Locate read after the park (its answers p and err): "parked: " and the
// reason when the reading names one, else the neutral "parked: waits its
// turn in the queue".
func ParkedWhy(p Place, err error) string {
	const neutral = "parked: waits its turn in the queue"
	if err != nil {
		return neutral
	}
	switch {
	case p.Where == InFlight:
		return "parked, and since let in: " + strings.TrimPrefix(p.Why(), "in flight: ")
	case p.Where == NotHeld:
		return "parked, and since " + cmp.Or(p.TaskState, "gone")
	case p.Reason == ReasonNone:
		return neutral
	}
	return "parked: " + p.Why()
}
