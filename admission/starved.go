package admission

import (
	"runtime"
	"sync"
	"time"
)

// A Redis deadline can pass with the reply already on the socket, unread:
// the goroutine that reads it, woken by the network poller, waits for a
// processor while the caller's timer wakes the caller at once. That happens
// when the producer's goroutines keep its processors busy, or when the
// machine leaves the whole process unscheduled for a while. Blaming Redis
// then would report an outage of a healthy Redis, and three in a row would
// open the breaker. So when a deadline passes, the gate first checks
// whether the process was able to run: if the check itself ran late, or a
// yield of the processor took long, the reply gets a grace of half the
// timeout more. A real outage is still reported by the timeout, or by one
// and a half timeouts when the process was starved besides.

// starvedSlack is how late a deadline's check may run, and how long a yield
// may take, before the process counts as starved.
const starvedSlack = 5 * time.Millisecond

// starved reports whether this process, rather than Redis, may be why a
// reply due at due is still unread: the check runs late, or yielding the
// processor (which queues the caller behind every goroutine ready to run,
// the reader included) takes long.
func starved(due time.Time) bool {
	woke := time.Now()
	runtime.Gosched()
	return woke.Sub(due) > starvedSlack || time.Since(woke) > starvedSlack
}

// graceFor is how much longer than timeout a reply is waited for once the
// process was found starved at the deadline.
func graceFor(timeout time.Duration) time.Duration { return timeout / 2 }

// A lateTimer calls its func once a timeout has passed since it was made,
// unless stopped first; if the process was starved at the timeout, only
// after a grace more.
type lateTimer struct {
	mu      sync.Mutex
	t       *time.Timer
	due     time.Time // zero once the grace is given
	stopped bool
	fired   bool
}

func afterTimeout(timeout time.Duration, f func()) *lateTimer {
	l := &lateTimer{due: time.Now().Add(timeout)}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t = time.AfterFunc(timeout, func() {
		l.mu.Lock()
		due := l.due
		l.mu.Unlock()
		graced := !due.IsZero() && starved(due) // unlocked: it yields
		l.mu.Lock()
		switch {
		case l.stopped:
		case graced:
			l.due = time.Time{}
			l.t.Reset(graceFor(timeout))
		default:
			l.fired = true
		}
		fire := l.fired
		l.mu.Unlock()
		if fire {
			f()
		}
	})
	return l
}

// stop stops l and reports whether its func was called.
func (l *lateTimer) stop() (fired bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	l.t.Stop()
	return l.fired
}
