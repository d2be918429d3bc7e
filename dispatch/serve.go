package dispatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/admitq/admitq/admission"
)

const (
	// heartbeat is how long a worker's record lasts without renewal; its
	// loops renew it at least every idleTick.
	heartbeat = 3 * time.Second
	idleTick  = time.Second
	// busyTick is how often a loop looks again while tenants wait with no
	// finish to wake it (the queue is full, or they sleep on their rate).
	busyTick = 50 * time.Millisecond
	// repairEvery is how often a loop checks a page of its queue's tasks
	// in flight against asynq.
	repairEvery = 2 * time.Second
	callTimeout = 2 * time.Second
)

// Server runs the dispatch of one worker's queues: a loop per queue that
// records the worker's concurrency, takes the tasks it finished, grants
// waiting tasks while the queue has space, and repairs. Make one with
// Serve; Close stops it.
type Server struct {
	d       *Dispatcher
	member  string
	most    int
	observe func(QueueStats)
	loops   map[string]*loop
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// finish is a task a worker finished.
type finish struct {
	id, tenant string
	ran        time.Duration
	done       bool
}

type loop struct {
	s     *Server
	queue string
	ch    chan finish
}

// Worker is what Serve needs to know of a worker.
type Worker struct {
	// Queues are the asynq queues it processes.
	Queues []string
	// Concurrency is how many tasks it runs at once; at least 1.
	Concurrency int
	// Fair makes its queues fair.
	Fair bool
	// Observe, when set, receives each queue's Stats every couple of
	// seconds. It must not block.
	Observe func(QueueStats)
}

// Serve records w on its queues at once (so producers follow within a
// second), and starts a loop for each.
func (d *Dispatcher) Serve(w Worker) (*Server, error) {
	queues, concurrency, fair := w.Queues, w.Concurrency, w.Fair
	if err := d.checkPrefix(); err != nil {
		return nil, err
	}
	if concurrency < 1 {
		return nil, fmt.Errorf("dispatch: concurrency %d, want at least 1", concurrency)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	flag := "0"
	if fair {
		flag = "1"
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		d:       d,
		member:  hex.EncodeToString(b[:]) + "|" + strconv.Itoa(concurrency) + "|" + flag,
		most:    2 * concurrency,
		observe: w.Observe,
		loops:   make(map[string]*loop, len(queues)),
		cancel:  cancel,
	}
	for _, q := range queues {
		l := &loop{s: s, queue: q, ch: make(chan finish, 4*concurrency)}
		cctx, ccancel := context.WithTimeout(ctx, callTimeout)
		_, _, _, err := l.turn(cctx, nil, nil, heartbeat, 0)
		ccancel()
		if err != nil {
			cancel()
			s.leave()
			return nil, err
		}
		s.loops[q] = l
	}
	for _, l := range s.loops {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			l.run(ctx)
		}()
	}
	return s, nil
}

// Finished tells the dispatcher that the worker finished task id of
// tenant in queue after running it for ran; done is false when asynq will
// retry it (the task keeps its tenant's place). The tenant's quota, as the
// gate reads it now, updates its cap and weight there. It may block
// briefly while the queue's loop catches up.
func (s *Server) Finished(queue, tenant, id string, ran time.Duration, done bool) {
	if l := s.loops[queue]; l != nil && id != "" {
		l.ch <- finish{id: id, tenant: tenant, ran: ran, done: done}
	}
}

// Close stops the loops, hands in the finishes they hold and takes the
// worker's record off its queues. Call it after the worker's handlers have
// returned.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
	s.leave()
}

// leave takes the worker off its queues, with what its loops still hold.
func (s *Server) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	for _, l := range s.loops {
		_, _, _, _ = l.turn(ctx, l.drain(nil), nil, 0, 0)
	}
}

func (l *loop) drain(fs []finish) []finish {
	for {
		select {
		case f := <-l.ch:
			fs = append(fs, f)
		default:
			return fs
		}
	}
}

// run is the queue's loop. A turn hands in the finishes and the moves of
// the last turn's grants, and grants more; the grants are admitted at once
// and moved in by the next turn, which follows without a pause.
func (l *loop) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	var fs []finish
	var ops []any // the last grants' moves, for the next turn
	repair := time.Now().Add(repairEvery)
	for {
		select {
		case <-ctx.Done():
			l.putBack(fs)
			l.s.d.move(context.WithoutCancel(ctx), l.queue, ops)
			return
		case f := <-l.ch:
			fs = append(fs, f)
		case <-t.C:
		}
		fs = l.drain(fs)
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		picks, waiting, later, err := l.turn(cctx, fs, ops, heartbeat, l.s.most)
		if err == nil {
			fs = later
			ops = l.s.d.admit(cctx, l.queue, picks)
		} else if ctx.Err() == nil {
			// The ops are kept for the next turn; their grants wait in
			// state g, where a repair pass would find them.
			l.s.d.log.Warn("admitq: dispatch turn failed", "queue", l.queue, "err", err)
		}
		if time.Now().After(repair) {
			l.s.d.repairAll(cctx, l.queue)
			if l.s.observe != nil {
				if qs, err := l.s.d.Stats(cctx, l.queue); err == nil {
					l.s.observe(qs)
				}
			}
			repair = time.Now().Add(repairEvery)
		}
		cancel()
		next := idleTick
		switch {
		case len(ops) > 0:
			next = 0 // move them in
		case len(fs) > 0:
			next = time.Millisecond // asynq is marking them done
		case len(picks) >= l.s.most:
			next = 0
		case waiting > 0 || err != nil:
			next = busyTick
		}
		t.Reset(next)
	}
}

// putBack returns finishes a stopping loop holds to its channel, for
// leave to hand in.
func (l *loop) putBack(fs []finish) {
	for _, f := range fs {
		select {
		case l.ch <- f:
		default:
		}
	}
}

// pick is a task granted to this worker to admit and move.
type pick struct {
	tenant, entry string
}

// turn runs fair_dispatch.lua: heartbeat (ttl 0 leaves), finishes, the
// moves ops (admit's), and up to most grants. It returns the grants, how
// many tenants wait, and the finishes to hand in again.
func (l *loop) turn(ctx context.Context, fs []finish, ops []any, ttl time.Duration, most int) ([]pick, int, []finish, error) {
	args := make([]any, 0, 5+5*len(fs)+len(ops))
	args = append(args, l.s.member, ttl.Microseconds(), most, len(fs))
	for _, f := range fs {
		done, cap, weight := 0, -1, 1.0
		if f.done {
			done = 1
		}
		if q, err := l.s.d.gate.Quota(ctx, f.tenant); err == nil {
			cap, weight = q.MaxInFlight, q.EffectiveWeight()
		}
		args = append(args, f.id, f.ran.Microseconds(), done, cap, weight)
	}
	args = append(append(args, len(ops)/3), ops...)
	res, err := l.s.d.run(ctx, l.s.d.scripts.dispatch, l.queue, args...)
	if err != nil {
		return nil, 0, nil, err
	}
	picks, rest, err := readPicks(res)
	if err != nil || len(rest) < 2 {
		return nil, 0, nil, errors.Join(err, fmt.Errorf("dispatch: fair_dispatch.lua returned %d values", len(res)))
	}
	var later []finish
	for _, v := range rest[2:] {
		if i := int(toInt(v)); i >= 1 && i <= len(fs) {
			later = append(later, fs[i-1])
		}
	}
	return picks, int(toInt(rest[0])), later, nil
}

// readPicks reads "n, then n pairs tenant, entry" from the head of res.
func readPicks(res []any) ([]pick, []any, error) {
	if len(res) < 1 {
		return nil, nil, errors.New("dispatch: empty reply")
	}
	n := int(toInt(res[0]))
	if len(res) < 1+2*n {
		return nil, nil, fmt.Errorf("dispatch: reply of %d values for %d grants", len(res), n)
	}
	picks := make([]pick, n)
	for i := range picks {
		t, _ := res[1+2*i].(string)
		e, _ := res[2+2*i].(string)
		picks[i] = pick{tenant: t, entry: e}
	}
	return picks, res[1+2*n:], nil
}

// admitAndMove admits each granted task through the gate, at its own
// not-before time, then moves them all in one fair_move.lua call (the
// queue's loop moves them with its next turn instead): in now
// when admitted now, else back at the head of their tenant's line, which
// sleeps until the gate's slot. So a waiting task is charged the moment it
// goes in, and the rate holds for start times. A tenant's grants are
// admitted in one call, in order; the tenants' calls run together, so the
// gate's group commit sends them as one pipeline.
func (d *Dispatcher) admitAndMove(ctx context.Context, queue string, picks []pick) {
	d.move(ctx, queue, d.admit(ctx, queue, picks))
}

// admit admits picks through the gate and returns their move ops (op,
// task ID, µs), for fair_move.lua or the next dispatch turn.
func (d *Dispatcher) admit(ctx context.Context, queue string, picks []pick) []any {
	if len(picks) == 0 {
		return nil
	}
	ops := make([]any, 3*len(picks))
	var wg sync.WaitGroup
	for _, run := range runs(picks) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.admitRun(ctx, queue, picks, run, ops)
		}()
	}
	wg.Wait()
	return ops
}

// move runs fair_move.lua with ops.
func (d *Dispatcher) move(ctx context.Context, queue string, ops []any) {
	if len(ops) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := d.run(ctx, d.scripts.move, queue, append([]any{len(ops) / 3}, ops...)...); err != nil {
		// The grants stay in state g; a repair pass finishes them.
		d.log.Warn("admitq: moving granted tasks failed; a repair pass will", "queue", queue, "err", err)
	}
}

// runs splits picks into runs of one tenant with one not-before time:
// each is [lo, hi) of picks.
func runs(picks []pick) [][2]int {
	var out [][2]int
	for lo := 0; lo < len(picks); {
		nb, _, _ := parseEntry(picks[lo].entry)
		hi := lo + 1
		for hi < len(picks) && picks[hi].tenant == picks[lo].tenant {
			if t, _, _ := parseEntry(picks[hi].entry); !t.Equal(nb) {
				break
			}
			hi++
		}
		out = append(out, [2]int{lo, hi})
		lo = hi
	}
	return out
}

// admitRun admits picks[run[0]:run[1]], one tenant's, and writes each
// one's move op (op, task ID, µs) into its place in ops.
func (d *Dispatcher) admitRun(ctx context.Context, queue string, picks []pick, run [2]int, ops []any) {
	tenant := picks[run[0]].tenant
	nb, _, _ := parseEntry(picks[run[0]].entry)
	ids := make([]string, 0, run[1]-run[0])
	for _, p := range picks[run[0]:run[1]] {
		_, id, _ := parseEntry(p.entry)
		ids = append(ids, id)
	}
	set := func(i int, op string, us int64) {
		ops[3*i], ops[3*i+1], ops[3*i+2] = op, ids[i-run[0]], us
	}
	ds, err := d.gate.AdmitBatchAt(ctx, tenant, ids, nb)
	if err == nil && len(ds) != len(ids) {
		err = fmt.Errorf("the gate returned %d decisions for %d tasks", len(ds), len(ids))
	}
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			d.log.Warn("admitq: admitting waiting tasks failed; they keep their places", "queue", queue, "tenant", tenant, "err", err)
		}
		for i := run[0]; i < run[1]; i++ {
			set(i, "back", time.Second.Microseconds())
		}
		return
	}
	for j, dec := range ds {
		i := run[0] + j
		switch dec.Outcome {
		case admission.Admitted:
			set(i, "go", 0)
		case admission.Deferred:
			// Not now: give the reserved slot back and wait for it, so
			// that the task is charged when it goes in, and goes in when
			// it is charged (asynq's scheduled set would start it up to a
			// poll late, beside the next second's tasks).
			if err := d.gate.Release(ctx, dec); err != nil {
				d.log.Warn("admitq: giving back a waiting task's future slot failed", "queue", queue, "tenant", tenant, "task_id", dec.ID, "err", err)
			}
			set(i, "back", max(dec.Delay(), time.Millisecond).Microseconds())
		default:
			set(i, "back", max(dec.Delay(), time.Millisecond).Microseconds())
		}
	}
}

// parseEntry reads a waiting entry's not-before time and task ID.
func parseEntry(e string) (time.Time, string, bool) {
	f := strings.SplitN(e, "|", 4)
	if len(f) != 4 {
		return time.Time{}, "", false
	}
	nb, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return time.Time{}, f[3], false
	}
	var t time.Time
	if nb > 0 {
		t = time.UnixMicro(nb)
	}
	return t, f[3], true
}

// repairAll runs fair_repair.lua over the whole of queue's run hash, page
// by page, and finishes the grants whose mover is gone.
func (d *Dispatcher) repairAll(ctx context.Context, queue string) {
	cursor := "0"
	for range 1000 {
		res, err := d.run(ctx, d.scripts.repair, queue, cursor, Grace.Microseconds())
		if err != nil || len(res) < 2 {
			return
		}
		cursor, _ = res[0].(string)
		picks, _, err := readPicks(res[1:])
		if err != nil {
			return
		}
		d.admitAndMove(ctx, queue, picks)
		if cursor == "0" || cursor == "" {
			return
		}
	}
}
