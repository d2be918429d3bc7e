package enqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/admitq/admitq/internal/redistest"
)

// echo stands in for asynq's write: it counts each call under its key and
// returns its argument, or fails when the argument is "fail".
var echo = redis.NewScript(`
if ARGV[1] == "fail" then return redis.error_reply("ERR told to fail") end
redis.call("INCR", KEYS[1])
return ARGV[1]`)

// pipelineSpy is a hook that sees every pipeline the pipelined client
// sends, and can hold them until released.
type pipelineSpy struct {
	pipelines atomic.Int64
	cmds      atomic.Int64
	inflight  atomic.Int64
	maxSize   atomic.Int64
	maxFlight atomic.Int64
	// hold, when set, makes each pipeline wait on it before it is sent;
	// onPipeline, when set, runs just before each pipeline is sent.
	hold       chan struct{}
	onPipeline func()
}

func (s *pipelineSpy) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *pipelineSpy) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (s *pipelineSpy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !scripts(cmds) {
			return next(ctx, cmds) // go-redis's own, such as a new connection's HELLO
		}
		s.pipelines.Add(1)
		s.cmds.Add(int64(len(cmds)))
		raise(&s.maxSize, int64(len(cmds)))
		raise(&s.maxFlight, s.inflight.Add(1))
		defer s.inflight.Add(-1)
		if s.onPipeline != nil {
			s.onPipeline()
		}
		if s.hold != nil {
			<-s.hold
		}
		return next(ctx, cmds)
	}
}

// scripts reports whether cmds are script or function calls, as the
// pipelined client's pipelines are.
func scripts(cmds []redis.Cmder) bool {
	return len(cmds) > 0 && (cmds[0].Name() == "evalsha" || cmds[0].Name() == "fcall")
}

func raise(m *atomic.Int64, v int64) {
	for {
		old := m.Load()
		if v <= old || m.CompareAndSwap(old, v) {
			return
		}
	}
}

// newSpied returns a pipelined client on a redis-server of its own, whose
// pipelines spy sees.
func newSpied(t *testing.T, spy *pipelineSpy, batch, flight int) (*pipelined, *redis.Client) {
	t.Helper()
	rdb := redistest.Start(t).Client(t)
	rdb.AddHook(spy)
	p := newPipelined(rdb)
	p.maxBatch, p.maxFlight = batch, flight
	return p, rdb
}

// newHeld is newSpied with one flight of batches of up to 16, each held
// until the test releases it, and echo loaded.
func newHeld(t *testing.T) (*pipelineSpy, *pipelined, *redis.Client) {
	t.Helper()
	spy := &pipelineSpy{hold: make(chan struct{})}
	p, rdb := newSpied(t, spy, 16, 1)
	if err := echo.Load(context.Background(), p).Err(); err != nil {
		t.Fatal(err)
	}
	return spy, p, rdb
}

// TestPipelinedSharesPipelines runs many concurrent script calls through a
// pipelined client: each gets its own reply, each runs exactly once, and
// they share pipelines no larger than the batch and no more in flight at
// once than allowed. The first calls find the script missing (NOSCRIPT)
// and fall back to EVAL, as asynq's do.
func TestPipelinedSharesPipelines(t *testing.T) {
	noLeaks(t)
	spy := &pipelineSpy{}
	p, rdb := newSpied(t, spy, 4, 2)
	const callers, calls = 32, 50
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			key := fmt.Sprintf("calls:%d", g)
			for i := range calls {
				arg := fmt.Sprintf("%d/%d", g, i)
				got, err := echo.Run(context.Background(), p, []string{key}, arg).Text()
				if err != nil || got != arg {
					errs <- fmt.Errorf("call %s = %q, %v; want its own argument back", arg, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for g := range callers {
		if n, err := rdb.Get(context.Background(), fmt.Sprintf("calls:%d", g)).Int(); err != nil || n != calls {
			t.Errorf("caller %d's script ran %d times (%v), want %d", g, n, err, calls)
		}
	}
	if s := spy.maxSize.Load(); s > 4 {
		t.Errorf("a pipeline carried %d calls, want at most 4", s)
	}
	if f := spy.maxFlight.Load(); f > 2 {
		t.Errorf("%d pipelines were in flight at once, want at most 2", f)
	}
	if n, c := spy.pipelines.Load(), spy.cmds.Load(); n >= c {
		t.Errorf("%d calls went out in %d pipelines: none were shared", c, n)
	}
	t.Logf("%d calls in %d pipelines", spy.cmds.Load(), spy.pipelines.Load())
}

// TestPipelinedErrorIsPerCall: a script error in one call of a pipeline
// is that call's alone.
func TestPipelinedErrorIsPerCall(t *testing.T) {
	noLeaks(t)
	spy, p, _ := newHeld(t)
	ctx := context.Background()
	// The first call holds the only flight, so the next ones share a pipeline.
	args := []string{"first", "a", "fail", "b"}
	replies := make([]*redis.Cmd, len(args))
	var wg sync.WaitGroup
	for i, arg := range args {
		wg.Go(func() { replies[i] = p.EvalSha(ctx, echo.Hash(), []string{"calls"}, arg) })
		waitFor(t, func() bool { return i == 0 && spy.pipelines.Load() == 1 || i > 0 && queuedCalls(p) == i })
	}
	close(spy.hold)
	wg.Wait()
	for i, arg := range args {
		got, err := replies[i].Text()
		if arg == "fail" {
			if err == nil || err.Error() != "ERR told to fail" {
				t.Errorf("call %q = %q, %v; want its own script error", arg, got, err)
			}
		} else if err != nil || got != arg {
			t.Errorf("call %q = %q, %v; want its own argument back", arg, got, err)
		}
	}
	if n := spy.pipelines.Load(); n != 2 {
		t.Errorf("%d pipelines, want 2: the first call's and the other three's", n)
	}
}

// TestPipelinedPipelineError: a hook that fails a whole pipeline without
// sending it fails each call in it with its error.
func TestPipelinedPipelineError(t *testing.T) {
	noLeaks(t)
	p, rdb := newSpied(t, &pipelineSpy{}, 16, 1)
	refused := errors.New("refused by a hook")
	rdb.AddHook(failPipelines{refused})
	if err := echo.Run(context.Background(), p, []string{"k"}, "x").Err(); !errors.Is(err, refused) {
		t.Errorf("err = %v, want the hook's error", err)
	}
}

// failPipelines fails every pipeline of script calls with its error,
// without sending it.
type failPipelines struct{ err error }

func (h failPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h failPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h failPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if scripts(cmds) {
			return h.err
		}
		return next(ctx, cmds)
	}
}

// TestPipelinedCallerLeavesBeforeSend: a caller whose ctx ends while its
// call waits for a pipeline leaves at once with the ctx's error, and its
// call is never sent. A caller whose call was sent waits for its reply
// even when its ctx ends, and gets it.
func TestPipelinedCallerLeavesBeforeSend(t *testing.T) {
	noLeaks(t)
	spy, p, rdb := newHeld(t)
	bg := context.Background()
	sentCtx, cancelSent := context.WithCancel(bg)
	sent := make(chan *redis.Cmd, 1)
	go func() { sent <- p.EvalSha(sentCtx, echo.Hash(), []string{"sent"}, "sent") }()
	waitFor(t, func() bool { return spy.pipelines.Load() == 1 }) // held in the hook, sent

	queuedCtx, cancelQueued := context.WithCancel(bg)
	left := make(chan *redis.Cmd, 1)
	go func() { left <- p.EvalSha(queuedCtx, echo.Hash(), []string{"left"}, "left") }()
	waitFor(t, func() bool { return queuedCalls(p) == 1 })
	cancelQueued()
	cancelSent()
	select {
	case cmd := <-left:
		if !errors.Is(cmd.Err(), context.Canceled) {
			t.Errorf("the queued caller got %v, want context.Canceled", cmd.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the queued caller did not leave when its ctx ended")
	}
	select {
	case cmd := <-sent:
		t.Fatalf("the sent caller left before its reply, with %v", cmd.Err())
	case <-time.After(50 * time.Millisecond):
	}
	close(spy.hold)
	if got, err := (<-sent).Text(); err != nil || got != "sent" {
		t.Errorf("the sent caller got %q, %v; want its reply", got, err)
	}
	waitFor(t, func() bool { return flights(p) == 0 })
	if n := rdb.Exists(bg, "left").Val(); n != 0 {
		t.Error("the call whose caller left was sent")
	}
	if n := spy.pipelines.Load(); n != 1 {
		t.Errorf("%d pipelines went out, want 1", n)
	}
}

// TestPipelinedDoneCtxSendsNothing: a call made with a ctx that is already
// done fails at once and sends nothing.
func TestPipelinedDoneCtxSendsNothing(t *testing.T) {
	spy := &pipelineSpy{}
	p, _ := newSpied(t, spy, 16, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.EvalSha(ctx, echo.Hash(), []string{"k"}, "x").Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if n := spy.pipelines.Load(); n != 0 {
		t.Errorf("%d pipelines went out, want none", n)
	}
}

// TestPipelinedPipelineDeadline: a pipeline's context carries the latest
// deadline among its callers, or none if one has none.
func TestPipelinedPipelineDeadline(t *testing.T) {
	var deadlines []string
	var mu sync.Mutex
	spy, p, rdb := newHeld(t)
	rdb.AddHook(deadlineHook(func(d time.Time, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		deadlines = append(deadlines, strconv.FormatBool(ok)+" "+d.Format(time.RFC3339Nano))
	}))
	bg := context.Background()
	later := time.Now().Add(time.Hour)
	cases := [][]time.Time{
		{later.Add(-time.Minute), later}, // the latest deadline wins
		{later, {}},                      // one caller without one: none
	}
	for _, deadlines := range cases {
		var wg sync.WaitGroup
		before := spy.pipelines.Load()
		wg.Go(func() { p.EvalSha(bg, echo.Hash(), []string{"k"}, "blocker") }) // holds the flight
		waitFor(t, func() bool { return spy.pipelines.Load() == before+1 })
		for i, d := range deadlines {
			ctx, cancel := bg, context.CancelFunc(func() {})
			if !d.IsZero() {
				ctx, cancel = context.WithDeadline(bg, d)
			}
			defer cancel()
			wg.Go(func() { p.EvalSha(ctx, echo.Hash(), []string{"k"}, "x") })
			waitFor(t, func() bool { return queuedCalls(p) == i+1 })
		}
		spy.hold <- struct{}{} // the blocker's pipeline
		spy.hold <- struct{}{} // the two callers'
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"false 0001-01-01T00:00:00Z", "true " + later.Format(time.RFC3339Nano),
		"false 0001-01-01T00:00:00Z", "false 0001-01-01T00:00:00Z",
	}
	if fmt.Sprint(deadlines) != fmt.Sprint(want) {
		t.Errorf("pipeline deadlines = %q, want %q", deadlines, want)
	}
}

// deadlineHook reports each pipeline's context deadline.
type deadlineHook func(d time.Time, ok bool)

func (h deadlineHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h deadlineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h deadlineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if scripts(cmds) {
			h(ctx.Deadline())
		}
		return next(ctx, cmds)
	}
}

// noLeaks fails t if goroutines started during it outlive it, the
// pipelines' included, once its Redis client and server are gone. Call it
// first: cleanups run last in, first out.
func noLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { redistest.VerifyNoLeaks(t, ignore) })
}

func queuedCalls(p *pipelined) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

func flights(p *pipelined) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inflight
}

// waitFor polls cond until it holds, for up to five seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPipelinedSentCallOutlivesItsDeadline: a call whose deadline passes
// after it was sent, before go-redis writes it (here, in a slow hook), still
// goes out: go-redis would otherwise fail it, unsent, with an error the
// Client could not tell from a failure after the write, and the task's slot
// would idle. Its caller gets the reply.
func TestPipelinedSentCallOutlivesItsDeadline(t *testing.T) {
	noLeaks(t)
	spy := &pipelineSpy{onPipeline: func() { time.Sleep(30 * time.Millisecond) }}
	p, rdb := newSpied(t, spy, 16, 1)
	bg := context.Background()
	if err := echo.Load(bg, p).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Millisecond)
	defer cancel()
	if got, err := p.EvalSha(ctx, echo.Hash(), []string{"late"}, "late").Text(); err != nil || got != "late" {
		t.Errorf("EvalSha = %q, %v; want its reply", got, err)
	}
	if n := rdb.Get(bg, "late").Val(); n != "1" {
		t.Errorf("the call ran %q times, want once", n)
	}
}

// TestPipelinedEvalFallbackAfterCtx: asynq falls back to EVAL when its
// EVALSHA finds the script missing (NOSCRIPT). The EVALSHA was sent, so the
// EVAL goes out too, even when the caller's ctx ended in between.
func TestPipelinedEvalFallbackAfterCtx(t *testing.T) {
	noLeaks(t)
	p, rdb := newSpied(t, &pipelineSpy{}, 16, 1)
	bg := context.Background()
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	rdb.AddHook(afterPipeline(cancel)) // ends ctx as the EVALSHA's NOSCRIPT comes back
	if got, err := echo.Run(ctx, p, []string{"fallback"}, "x").Text(); err != nil || got != "x" {
		t.Errorf("Run = %q, %v; want the EVAL's reply", got, err)
	}
	if ctx.Err() == nil {
		t.Fatal("the ctx never ended")
	}
	if n := rdb.Get(bg, "fallback").Val(); n != "1" {
		t.Errorf("the script ran %q times, want once", n)
	}
}

// afterPipeline calls f after each pipeline of script calls.
type afterPipeline func()

func (h afterPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h afterPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h afterPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if scripts(cmds) {
			h()
		}
		return err
	}
}

// TestPipelinedFunctionCalls: function calls (the dispatcher's parks)
// share pipelines with script calls (asynq's writes), each gets its own
// reply, and a function call is not traced as a write of the task.
func TestPipelinedFunctionCalls(t *testing.T) {
	spy, p, rdb := newHeld(t)
	ctx := context.Background()
	if err := rdb.FunctionLoad(ctx, "#!lua name=echofn\nredis.register_function('echofn', function(keys, args) return 'fn:' .. args[1] end)").Err(); err != nil {
		t.Fatal(err)
	}
	first := make(chan *redis.Cmd, 1)
	go func() { first <- p.EvalSha(ctx, echo.Hash(), []string{"calls"}, "first") }()
	waitFor(t, func() bool { return spy.pipelines.Load() == 1 })
	tr := &writeTrace{}
	traced := context.WithValue(ctx, writeTraceKey{}, tr)
	replies := make([]*redis.Cmd, 3)
	var wg sync.WaitGroup
	for i := range replies {
		wg.Go(func() {
			if i == 1 {
				replies[i] = p.EvalSha(ctx, echo.Hash(), []string{"calls"}, "w")
				return
			}
			replies[i] = p.FCall(traced, "echofn", []string{"k"}, strconv.Itoa(i))
		})
		waitFor(t, func() bool { return queuedCalls(p) == i+1 })
	}
	close(spy.hold)
	wg.Wait()
	<-first
	for i, want := range []string{"fn:0", "w", "fn:2"} {
		if got, err := replies[i].Text(); err != nil || got != want {
			t.Errorf("call %d = %q, %v; want %q", i, got, err, want)
		}
	}
	if n := spy.pipelines.Load(); n != 2 {
		t.Errorf("%d pipelines, want 2: the first call's and the other three's", n)
	}
	if tr.sent.Load() {
		t.Error("a function call was traced as the task's write")
	}
}
