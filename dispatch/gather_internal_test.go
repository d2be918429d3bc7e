package dispatch

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
)

// A loop lets finishes gather only while asynq's pending list keeps the
// workers busy for gatherSpare times a gathering and a turn, at the peak
// rate they finish tasks, which a stall does not lower at once; the
// deeper the list is in time, the longer, up to gatherMost.
func TestGatheringNeverLetsThePendingListRunDry(t *testing.T) {
	l := &loop{s: &Server{most: 2 * 16}}
	l.pace.refill = (500 * time.Microsecond).Seconds()
	now := time.Unix(0, 0)
	l.pace.turned(now)
	for range 50 { // 16 workers finishing 8,000 tasks a second
		l.pace.got = 8
		now = now.Add(time.Millisecond)
		l.pace.turned(now)
	}
	// gathering for g needs queued/8,000 s ≥ 1.5 × (0.5 ms + g)
	for _, c := range []struct {
		queued, live int
		want         time.Duration
	}{
		{queued: 0, live: 16},
		{queued: 8, live: 16}, // 1 ms of work: 1.125 ms is needed for gatherFor
		{queued: 10, live: 16, want: 333333 * time.Nanosecond},  // 1.25 ms
		{queued: 40, live: 16, want: 2833333 * time.Nanosecond}, // 5 ms
		{queued: 40, live: 32, want: 1166667 * time.Nanosecond}, // two such workers finish twice as fast
		{queued: 48, live: 16, want: 3500 * time.Microsecond},   // 6 ms
		{queued: 100, live: 16, want: gatherMost},               // 12.5 ms
	} {
		if got := l.gather(turnResult{queued: c.queued, live: c.live}, true); (got - c.want).Abs() > time.Microsecond {
			t.Errorf("queued %d, live %d: gather %v, want %v", c.queued, c.live, got, c.want)
		}
	}
	if got := l.gather(turnResult{queued: 100, live: 16}, false); got != 0 {
		t.Errorf("after a failed turn: gather %v", got)
	}
	// A stall (nothing finishes for 20 ms: the workers sleep on an empty
	// list) leaves the peak rate about as it was.
	l.pace.got = 0
	l.pace.turned(now.Add(20 * time.Millisecond))
	if got := l.gather(turnResult{queued: 40, live: 16}, true); got < 2800*time.Microsecond || got > 2850*time.Microsecond {
		t.Errorf("after a stall: gather %v, want about 2.83 ms", got)
	}
}

// A grant for the front, or the finish of a capped tenant's task or of a
// task that carries concurrency keys, cuts the gathering out: they go in
// at once, however long the pending list would let finishes gather, for
// a cap's and a key's places are few. The finishes go through Finished,
// as a worker hands them to the loop; a keyed task that asynq will retry
// frees no place, and gathers.
func TestFrontsAndCappedOrKeyedFinishesDoNotGather(t *testing.T) {
	ctx := context.Background()
	d, rdb, _ := rig(t, admission.Quota{Limit: 1000, Window: time.Second}) // no cap
	if err := admission.NewRedisQuotas(rdb).Set(ctx, "capped", q1); err != nil {
		t.Fatal(err)
	}
	l := &loop{s: &Server{d: d, most: 2 * 16}, ch: make(chan finish, 4)}
	l.s.loops = map[string]*loop{"default": l}
	l.pace.refill = (500 * time.Microsecond).Seconds()
	l.pace.peak = 8000
	tr := turnResult{queued: 200, live: 16} // 25 ms of work: gatherMost
	type fin struct {
		tenant string
		done   bool
		keys   []string
		urgent bool // it goes in at once, in the loop too
	}
	for _, c := range []struct {
		name string
		ops  []moveOp
		fs   []fin
		want time.Duration
	}{
		{name: "nothing waits", want: gatherMost},
		{name: "a move behind the others", ops: []moveOp{{op: opGo, id: "a"}}, want: gatherMost},
		{name: "an uncapped tenant's finish", fs: []fin{{tenant: "free", done: true}}, want: gatherMost},
		{name: "a move to the front", ops: []moveOp{{op: opGo, id: "a"}, {op: opFront, id: "b"}}},
		{name: "a capped tenant's finish", fs: []fin{{tenant: "free", done: true}, {tenant: "capped", done: true, urgent: true}}},
		{name: "a keyed task's finish", fs: []fin{{tenant: "free", done: true, keys: []string{"api:a", "api:b"}, urgent: true}}},
		{name: "a keyed task's retry", fs: []fin{{tenant: "free", keys: []string{"api:a"}}}, want: gatherMost},
	} {
		fs := make([]finish, len(c.fs))
		for i, f := range c.fs {
			l.s.Finished("default", f.tenant, "t"+strconv.Itoa(i), time.Millisecond, f.done, f.keys...)
			fs[i] = <-l.ch
			if fs[i].urgent() != f.urgent {
				t.Errorf("%s: finish %d urgent %v, want %v", c.name, i, fs[i].urgent(), f.urgent)
			}
		}
		if got := l.gatherAfter(tr, true, c.ops, fs); got != c.want {
			t.Errorf("%s: gather %v, want %v", c.name, got, c.want)
		}
	}
}

// The rate follows a pool that starts to drain within a few turns, however
// long the turns between: a worker that held its tasks, finishing one
// every 12 ms, that then finishes 8,000 a second, gathering 4 ms a turn.
func TestTheRateFollowsAPoolThatStartsToDrain(t *testing.T) {
	var p pace
	now := time.Unix(0, 0)
	p.turned(now)
	for range 40 { // two seconds held
		p.got = 4
		now = now.Add(50 * time.Millisecond)
		p.turned(now)
	}
	for range 3 {
		p.got = 32
		now = now.Add(4 * time.Millisecond)
		p.turned(now)
	}
	if p.peak < 0.6*8000 {
		t.Errorf("after three 4 ms turns of a pool finishing 8,000 tasks a second: peak %.0f a second, want at least 4,800", p.peak)
	}
}

// The finishes that end a spell without any (a pool that was idle, or
// whose workers held their tasks) came over a time no turn saw: the loop
// does not gather on them, and the next turn measures the rate afresh. A
// pool of 16 held for 300 ms whose held tasks then end at once, with two
// tasks pending, read 50 tasks a second from them and gathered 4 ms.
func TestAQuietSpellStartsTheRateAfresh(t *testing.T) {
	for _, turns := range []time.Duration{0, 50 * time.Millisecond} {
		l := &loop{s: &Server{most: 2 * 16}}
		l.pace.refill = (500 * time.Microsecond).Seconds()
		now := time.Unix(0, 0)
		l.pace.turned(now)
		for turns > 0 && now.Before(time.Unix(0, 0).Add(300*time.Millisecond)) {
			now = now.Add(turns) // turns that hand in nothing
			l.pace.turned(now)
		}
		now = time.Unix(0, 0).Add(300 * time.Millisecond)
		l.pace.got = 15
		l.pace.turned(now)
		if got := l.gather(turnResult{queued: 2, live: 16}, true); got != 0 {
			t.Errorf("turns every %v: on the finishes that end a quiet spell, gather %v, want none", turns, got)
		}
		l.pace.got = 8 // 16 workers finishing 8,000 tasks a second
		now = now.Add(time.Millisecond)
		l.pace.turned(now)
		if l.pace.rate != 8000 || l.pace.peak != 8000 {
			t.Errorf("turns every %v: the next turn reads rate %.0f, peak %.0f, want 8,000", turns, l.pace.rate, l.pace.peak)
		}
	}
	// A stall shorter than quietFor keeps the rate it spans.
	var p pace
	now := time.Unix(0, 0)
	p.turned(now)
	for range 20 {
		p.got = 8
		now = now.Add(time.Millisecond)
		p.turned(now)
	}
	p.got = 8
	now = now.Add(20 * time.Millisecond)
	p.turned(now)
	if p.peak < 7000 || p.rate == 0 {
		t.Errorf("after a stall of %v: rate %.0f, peak %.0f, want the peak near 8,000", 20*time.Millisecond, p.rate, p.peak)
	}
}

// The refill runs from the start of a turn that grants tasks to the end of
// the turn that moves them in.
func TestTheRefillRunsFromTheGrantToTheMove(t *testing.T) {
	var p pace
	began := time.Now().Add(-2 * time.Millisecond)
	p.turnEnded(began, false, true) // grants, moved in by the next turn
	p.turnEnded(time.Now(), false, true)
	if p.granted != began {
		t.Fatalf("a second turn with grants to move moved the first's start to %v", p.granted)
	}
	p.turnEnded(time.Now(), true, false)
	if p.refill < (2*time.Millisecond).Seconds()/8 || !p.granted.IsZero() {
		t.Errorf("after the move: refill %.6f s (an eighth of about 2 ms), granted %v", p.refill, p.granted)
	}
}
