package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
)

// TestFlattening sends a noisy tenant's burst of four times its quota, from
// four producers at once, and a quiet tenant's few tasks right after, to
// one worker. It checks that:
//
//   - every task runs exactly once, and as many ran as were sent;
//   - no task starts before its slot (Decision.At);
//   - the quiet tenant's tasks start before the noisy tenant's first
//     deferred slot: they do not wait behind its surplus;
//   - the noisy tenant's starts stay within its quota per window, plus the
//     slack of asynq's scheduling.
//
// The slack: the gate records at most Limit slots in any Window, exactly.
// asynq, though, moves a deferred task to its queue only when the worker's
// forwarder next looks, every DelayedTaskCheckInterval (worker default 1 s),
// and an idle worker picks it up within 1.5 × TaskCheckInterval. So a task
// starts from 0 up to some `late` after its slot. Starts then keep the quota
// only in windows shortened by that slack: any interval of Window − late
// holds at most Limit starts. A whole Window can hold the starts of a
// Window stretched by late, at most Limit × (1 + ⌈late/Window⌉): with
// consecutive whole-second batches, one late and the next on time, two
// batches start within one second.
//
// Measured here (Limit 10, Window 1 s, the worker's 1 s forwarder, a 50 ms
// idle poll, -race, 2 CPUs, 10 runs): late is 0.3 to 0.95 s; the fullest
// 1 s window holds 16 to 20 starts, while every window of 1 s − late holds
// at most 10, and the gate's own slots never exceed 10 in any 1 s.
func TestFlattening(t *testing.T) {
	const (
		limit     = 10
		window    = time.Second
		noisyN    = 4 * limit
		producers = 4
		quietN    = 5
	)
	q := admission.Quota{Limit: limit, Window: window, MaxDelay: 10 * time.Second}
	s := newStack(t, admission.StaticQuotas{Default: &q})
	rec := newRecorder(noisyN + quietN)
	s.startWorker(t, testWorkerConfig(t, 2*limit), rec)
	ctx := context.Background()

	var (
		mu        sync.Mutex
		decisions = make(map[string]admission.Decision) // by task ID
		enqueued  = make(map[string]time.Time)          // when Enqueue returned
	)
	record := func(tenant string, i int) {
		info, d, err := s.client.Enqueue(ctx, tenant, asynq.NewTask("work", []byte(fmt.Sprint(i))))
		if err != nil {
			t.Errorf("Enqueue(%s #%d): %v", tenant, i, err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		decisions[info.ID] = d
		enqueued[info.ID] = time.Now()
	}

	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range noisyN / producers {
				record("noisy", p*noisyN/producers+i)
			}
		})
	}
	wg.Wait()
	for i := range quietN {
		record("quiet", i)
	}
	if t.Failed() {
		t.FailNow()
	}

	rec.wait(t)
	s.waitQueueEmpty(t, "default")
	starts := rec.snapshot() // after the queue drained: a second run would show

	// Exactly once, nothing lost.
	runs := make(map[string]int)
	for _, st := range starts {
		runs[st.ID]++
	}
	wantRuns := make(map[string]int)
	for id := range decisions {
		wantRuns[id] = 1
	}
	if diff := cmp.Diff(wantRuns, runs); diff != "" {
		t.Errorf("runs per task mismatch (-want,+got):\n%s", diff)
	}
	if len(starts) != noisyN+quietN {
		t.Errorf("%d runs, want %d", len(starts), noisyN+quietN)
	}

	// Never before the slot; how late after it.
	var late time.Duration
	outcomes := make(map[string]map[admission.Outcome]int)
	for _, st := range starts {
		d := decisions[st.ID]
		if outcomes[d.Tenant] == nil {
			outcomes[d.Tenant] = make(map[admission.Outcome]int)
		}
		outcomes[d.Tenant][d.Outcome]++
		if st.Tenant != d.Tenant {
			t.Errorf("task %s ran as tenant %q, want %q", st.ID, st.Tenant, d.Tenant)
		}
		if st.At.Before(d.At) {
			t.Errorf("task %s (%s, %s) started at %v, %v before its slot %v",
				st.ID, d.Tenant, d.Outcome, st.At, d.At.Sub(st.At), d.At)
		}
		late = max(late, st.At.Sub(d.At))
	}
	wantOutcomes := map[string]map[admission.Outcome]int{
		"noisy": {admission.Admitted: limit, admission.Deferred: noisyN - limit},
		"quiet": {admission.Admitted: quietN},
	}
	if diff := cmp.Diff(wantOutcomes, outcomes); diff != "" {
		t.Errorf("outcomes per tenant mismatch (-want,+got):\n%s", diff)
	}

	// The quiet tenant does not wait behind the noisy one's surplus.
	var firstDeferred time.Time
	for _, d := range decisions {
		if d.Outcome == admission.Deferred && (firstDeferred.IsZero() || d.At.Before(firstDeferred)) {
			firstDeferred = d.At
		}
	}
	var quietWait time.Duration
	for _, st := range starts {
		if st.Tenant != "quiet" {
			continue
		}
		quietWait = max(quietWait, st.At.Sub(enqueued[st.ID]))
		if !st.At.Before(firstDeferred) {
			t.Errorf("quiet task %s started at %v, not before the noisy tenant's first deferred slot %v", st.ID, st.At, firstDeferred)
		}
	}

	// The noisy tenant's starts per window.
	var noisy []time.Time
	for _, st := range starts {
		if st.Tenant == "noisy" {
			noisy = append(noisy, st.At)
		}
	}
	fullest := maxInWindow(noisy, window)
	bound := limit * (1 + int((late+window-1)/window))
	t.Logf("noisy tenant: %d tasks, slots over %v, started over %v; latest start after its slot (the slack): %v",
		noisyN, lastSlot(decisions, "noisy").Sub(firstSlot(decisions, "noisy")), span(noisy), late)
	t.Logf("noisy tenant: fullest %v window: %d starts (limit %d, at most %d with the slack)", window, fullest, limit, bound)
	t.Logf("quiet tenant: longest wait from enqueue to start %v", quietWait)
	if fullest > bound {
		t.Errorf("the fullest %v window holds %d noisy starts, want at most %d", window, fullest, bound)
	}
	if late < window {
		short := window - late
		n := maxInWindow(noisy, short)
		t.Logf("noisy tenant: fullest %v window (%v less the slack): %d starts", short, window, n)
		if n > limit {
			t.Errorf("the fullest %v window holds %d noisy starts, want at most %d", short, n, limit)
		}
	}
	// The gate's own bound is exact: at most limit slots in any window.
	var slots []time.Time
	for _, d := range decisions {
		if d.Tenant == "noisy" {
			slots = append(slots, d.At)
		}
	}
	if n := maxInWindow(slots, window); n > limit {
		t.Errorf("the fullest %v window holds %d noisy slots, want at most %d", window, n, limit)
	}
}

// maxInWindow returns the most times that fall in any half-open interval
// [t, t+w).
func maxInWindow(ts []time.Time, w time.Duration) int {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, time.Time.Compare)
	most, j := 0, 0
	for i := range ts {
		for j < len(ts) && ts[j].Sub(ts[i]) < w {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

func span(ts []time.Time) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	return slices.MaxFunc(ts, time.Time.Compare).Sub(slices.MinFunc(ts, time.Time.Compare))
}

func firstSlot(ds map[string]admission.Decision, tenant string) time.Time {
	var first time.Time
	for _, d := range ds {
		if d.Tenant == tenant && (first.IsZero() || d.At.Before(first)) {
			first = d.At
		}
	}
	return first
}

func lastSlot(ds map[string]admission.Decision, tenant string) time.Time {
	var last time.Time
	for _, d := range ds {
		if d.Tenant == tenant && d.At.After(last) {
			last = d.At
		}
	}
	return last
}
