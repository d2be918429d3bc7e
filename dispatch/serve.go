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
	id   string
	ran  time.Duration
	done bool
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
		_, _, err := l.turn(cctx, nil, heartbeat, 0)
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

// Finished tells the dispatcher that the worker finished task id of queue
// after running it for ran; done is false when asynq will retry it (the
// task keeps its tenant's place). It may block briefly while the queue's
// loop catches up.
func (s *Server) Finished(queue, id string, ran time.Duration, done bool) {
	if l := s.loops[queue]; l != nil && id != "" {
		l.ch <- finish{id: id, ran: ran, done: done}
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
		_, _, _ = l.turn(ctx, l.drain(nil), 0, 0)
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

func (l *loop) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	var fs []finish
	repair := time.Now().Add(repairEvery)
	for {
		select {
		case <-ctx.Done():
			l.putBack(fs)
			return
		case f := <-l.ch:
			fs = append(fs, f)
		case <-t.C:
		}
		fs = l.drain(fs)
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		picks, waiting, err := l.turn(cctx, fs, heartbeat, l.s.most)
		if err == nil {
			fs = fs[:0]
			l.s.d.admitAndMove(cctx, l.queue, picks)
		} else if ctx.Err() == nil {
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

// turn runs fair_dispatch.lua: heartbeat (ttl 0 leaves), finishes, and up
// to most grants. It returns the grants and how many tenants wait.
func (l *loop) turn(ctx context.Context, fs []finish, ttl time.Duration, most int) ([]pick, int, error) {
	args := make([]any, 0, 4+3*len(fs))
	args = append(args, l.s.member, ttl.Microseconds(), most, len(fs))
	for _, f := range fs {
		done := 0
		if f.done {
			done = 1
		}
		args = append(args, f.id, f.ran.Microseconds(), done)
	}
	res, err := l.s.d.run(ctx, l.s.d.scripts.dispatch, l.queue, args...)
	if err != nil {
		return nil, 0, err
	}
	picks, rest, err := readPicks(res)
	if err != nil || len(rest) != 2 {
		return nil, 0, errors.Join(err, fmt.Errorf("dispatch: fair_dispatch.lua returned %d values", len(res)))
	}
	return picks, int(toInt(rest[0])), nil
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
// not-before time (the rate rule holds for start times), then moves them
// all in one fair_move.lua call: in at their slots, or back in line until
// their tenant's rate allows. The gate's calls run together, so its group
// commit sends them as one pipeline.
func (d *Dispatcher) admitAndMove(ctx context.Context, queue string, picks []pick) {
	if len(picks) == 0 {
		return
	}
	ops := make([]any, 1, 1+3*len(picks))
	ops[0] = len(picks)
	type result struct {
		op string
		id string
		us int64
	}
	results := make([]result, len(picks))
	var wg sync.WaitGroup
	for i, p := range picks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nb, id, ok := parseEntry(p.entry)
			if !ok {
				results[i] = result{"free", id, 0}
				return
			}
			dec, err := d.gate.AdmitAt(ctx, p.tenant, id, nb)
			switch {
			case err != nil:
				if !errors.Is(err, context.Canceled) {
					d.log.Warn("admitq: admitting a waiting task failed; it keeps its place", "queue", queue, "tenant", p.tenant, "task_id", id, "err", err)
				}
				results[i] = result{"back", id, time.Second.Microseconds()}
			case dec.Outcome == admission.Rejected:
				results[i] = result{"back", id, max(dec.Delay(), time.Millisecond).Microseconds()}
			case dec.Outcome == admission.Deferred:
				results[i] = result{"go", id, dec.At.UnixMicro()}
			default:
				results[i] = result{"go", id, 0}
			}
		}()
	}
	wg.Wait()
	for _, r := range results {
		ops = append(ops, r.op, r.id, r.us)
	}
	if _, err := d.run(ctx, d.scripts.move, queue, ops...); err != nil {
		// The grants stay in state g; a repair pass finishes them.
		d.log.Warn("admitq: moving granted tasks failed; a repair pass will", "queue", queue, "err", err)
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
