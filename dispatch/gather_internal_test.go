package dispatch

import (
	"testing"
	"time"
)

// A loop lets finishes gather only while asynq's pending list keeps the
// workers busy for three turns and three gatherings more, at the peak rate
// they finish tasks, which a stall does not lower at once; the deeper the
// list is in time, the longer, up to gatherMost.
func TestGatheringNeverLetsThePendingListRunDry(t *testing.T) {
	l := &loop{s: &Server{most: 2 * 16}}
	l.pace.cycle = (500 * time.Microsecond).Seconds()
	now := time.Unix(0, 0)
	l.pace.turned(now)
	for range 50 { // 16 workers finishing 8,000 tasks a second
		l.pace.got = 8
		now = now.Add(time.Millisecond)
		l.pace.turned(now)
	}
	// gathering for g needs queued/8,000 s ≥ 3 × (0.5 ms + g)
	for _, c := range []struct {
		queued, live int
		want         time.Duration
	}{
		{queued: 0, live: 16},
		{queued: 8, live: 16},  // 1 ms of work: no
		{queued: 32, live: 16}, // 4 ms: 4.5 ms is needed for gatherFor
		{queued: 40, live: 16, want: 1166667 * time.Nanosecond}, // 5 ms
		{queued: 40, live: 32}, // two such workers finish twice as fast
		{queued: 100, live: 16, want: 3666667 * time.Nanosecond}, // 12.5 ms
		{queued: 200, live: 16, want: gatherMost},                // 25 ms
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
	if got := l.gather(turnResult{queued: 40, live: 16}, true); got < gatherFor || got > 1200*time.Microsecond {
		t.Errorf("after a stall: gather %v, want about 1.17 ms", got)
	}
}
