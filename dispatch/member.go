package dispatch

import (
	"strconv"
	"strings"
	"time"
)

// DefaultRestartGrace is how long a queue stays dispatched after its last
// worker with a gate left or lapsed, unless the worker set its own
// (Worker.RestartGrace): producers keep holding capped, paused and fair
// tasks meanwhile, so that a worker's restart does not open the caps. A
// queue that no worker with a gate served for longer goes straight in.
const DefaultRestartGrace = 30 * time.Second

// workerMember is a gate worker's record in a queue's workers ZSET, as
// fair.lua's capacity() reads it: "<id>|<concurrency>|<fair 0/1>|<restart
// grace ms>", scored with its expiry in µs. A record written before the
// grace was part of it has three fields and DefaultRestartGrace.
type workerMember struct {
	id          string
	concurrency int
	fair        bool
	grace       time.Duration
}

func (m workerMember) String() string {
	return m.id + "|" + strconv.Itoa(m.concurrency) + "|" + strconv.Itoa(flag(m.fair)) + "|" +
		strconv.FormatInt(m.grace.Milliseconds(), 10)
}

// parseWorkerMember reads s as a workerMember.
func parseWorkerMember(s string) (workerMember, bool) {
	f := strings.Split(s, "|")
	if len(f) != 3 && len(f) != 4 {
		return workerMember{}, false
	}
	c, err := strconv.Atoi(f[1])
	if err != nil || (f[2] != "0" && f[2] != "1") {
		return workerMember{}, false
	}
	m := workerMember{id: f[0], concurrency: c, fair: f[2] == "1", grace: DefaultRestartGrace}
	if len(f) == 4 {
		ms, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return workerMember{}, false
		}
		m.grace = time.Duration(ms) * time.Millisecond
	}
	return m, true
}

// state tells of a member whose record expires at expiry µs, at now µs:
// live (its heartbeat holds: its concurrency counts) and recent (live, or
// lapsed within its restart grace: the queue is still dispatched).
func (m workerMember) state(expiry, now int64) (live, recent bool) {
	return expiry >= now, expiry+m.grace.Microseconds() >= now
}
