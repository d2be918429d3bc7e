package dispatch_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/internal/worktime"
)

// backlog enqueues n tasks of each tenant at once, from a goroutine each,
// and returns every ID.
func (s *stack) backlog(n int, runs map[string]time.Duration) []string {
	var mu sync.Mutex
	var all []string
	var wg sync.WaitGroup
	for tenant, d := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids := s.enqueue(tenant, n, d)
			mu.Lock()
			all = append(all, ids...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return all
}

// enqueueAsync is enqueue from a goroutine of its own, waited for.
func (s *stack) enqueueAsync(tenant string, n int, d time.Duration) []string {
	return s.backlog(n, map[string]time.Duration{tenant: d})
}

// backlogged sends each tenant's backlog while the queue is served but no
// task runs, then starts a fair pool of concurrency workers and waits for
// every task: so both tenants have a backlog from the first start on, and
// the shares are the dispatcher's, not the producers' pace.
func (s *stack) backlogged(concurrency, n int, runs map[string]time.Duration) {
	s.t.Helper()
	hold, err := dispatch.New(s.rdb, s.gate, nil).Serve(dispatch.Worker{Queues: []string{"default"}, Concurrency: concurrency, Fair: true})
	if err != nil {
		s.t.Fatal(err)
	}
	ids := s.backlog(n, runs)
	s.startWorker(concurrency, true)
	hold.Close()
	s.waitRuns(ids, 60*time.Second)
}

// whileBoth returns each tenant's share of the worker time from the first
// start until the first of a and b started its last task.
func (s *stack) whileBoth(a, b string) map[string]float64 {
	s.mu.Lock()
	from, to := worktime.Contended(s.spans, a, b)
	s.mu.Unlock()
	return s.shares(from, to)
}

// Under contention, worker time goes by weight: 3:1.
func TestWeightsShareWorkerTime(t *testing.T) {
	s := newStack(t, generous)
	heavy := generous
	heavy.Weight = 3
	s.setQuota("heavy", heavy)
	s.backlogged(4, 150, map[string]time.Duration{"heavy": 10 * time.Millisecond, "light": 10 * time.Millisecond})
	got := s.whileBoth("heavy", "light")
	ratio := got["heavy"] / got["light"]
	t.Logf("worker time at weights 3:1: %.2f×", ratio)
	if ratio < 2.4 || ratio > 3.6 {
		t.Errorf("heavy got %.2f× light's worker time at weights 3:1; want about 3", ratio)
	}
}

// Shares are of worker time, not task counts: a tenant whose tasks run 4×
// as long gets half the worker time at equal weight, not 4/5 of it.
func TestSharesAreOfWorkerTime(t *testing.T) {
	s := newStack(t, generous)
	// Four seconds of worker time each, so both stay backlogged.
	hold, err := dispatch.New(s.rdb, s.gate, nil).Serve(dispatch.Worker{Queues: []string{"default"}, Concurrency: 4, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := append(s.enqueueAsync("long", 100, 40*time.Millisecond), s.enqueueAsync("short", 400, 10*time.Millisecond)...)
	s.startWorker(4, true)
	hold.Close()
	s.waitRuns(ids, 60*time.Second)
	got := s.whileBoth("long", "short")
	t.Logf("worker time, 40 ms against 10 ms tasks at equal weight: long %.2f, short %.2f", got["long"], got["short"])
	if got["long"] < 0.38 || got["long"] > 0.62 {
		t.Errorf("long's share of worker time is %.2f; want about 0.5", got["long"])
	}
}

// A light tenant's task waits about a round of work behind a noisy
// tenant's deep backlog, not behind the backlog.
func TestLightTenantWaitsARoundNotTheBacklog(t *testing.T) {
	s := newStack(t, generous)
	s.startWorker(8, true)
	noisy := s.enqueue("noisy", 1000, 10*time.Millisecond)
	var light []string
	for range 20 {
		light = append(light, s.enqueue("light", 1, 10*time.Millisecond)...)
		time.Sleep(30 * time.Millisecond)
	}
	s.waitRuns(light, 10*time.Second)
	s.mu.Lock()
	waits := slices.Clone(s.wait["light"])
	s.mu.Unlock()
	slices.Sort(waits)
	p99 := waits[len(waits)*99/100]
	t.Logf("light waits behind 1,000 noisy tasks of 10 ms on 8 workers: p50 %v, max %v", waits[len(waits)/2], p99)
	// Behind the backlog, it would wait 1,000 × 10 ms / 8 ≈ 1.25 s.
	if p99 > 250*time.Millisecond {
		t.Errorf("light's worst wait is %v; want about a round of work, far below the backlog's 1.25 s", p99)
	}
	s.waitRuns(noisy, 60*time.Second)
}

// A tenant that was alone is not punished for it, and one that was idle
// banks no credit: when a second tenant arrives, the two share from then
// on.
func TestNoBankedCredit(t *testing.T) {
	s := newStack(t, generous)
	s.startWorker(4, true)
	early := s.enqueue("early", 600, 10*time.Millisecond)
	time.Sleep(400 * time.Millisecond) // early runs alone
	arrived := time.Now()
	late := s.enqueue("late", 200, 10*time.Millisecond)
	time.Sleep(400 * time.Millisecond)
	// Shares mean something only while both have tasks waiting: on a
	// loaded machine the enqueues are slow and early's backlog may run
	// out first. The window ends at the first start of a tenant's last task.
	end := time.Now()
	s.mu.Lock()
	last := map[string]time.Time{}
	for _, e := range s.started {
		last[e.tenant] = e.at
	}
	s.mu.Unlock()
	for _, tenant := range []string{"early", "late"} {
		if at, ok := last[tenant]; ok && s.ran(lastID(tenant, early, late)) == 1 && at.Before(end) {
			end = at
		}
	}
	from := arrived.Add(100 * time.Millisecond)
	if end.Sub(from) < 100*time.Millisecond {
		t.Fatalf("both tenants had tasks waiting for only %v after late arrived; want a longer run to judge", end.Sub(from))
	}
	got := s.shares(from, end)
	t.Logf("after late arrived: early %.2f, late %.2f", got["early"], got["late"])
	if got["early"] < 0.35 || got["late"] < 0.35 {
		t.Errorf("after the second tenant arrived, shares are early %.2f, late %.2f; want about half each", got["early"], got["late"])
	}
	s.waitRuns(append(early, late...), 60*time.Second)
}

// lastID is the ID of tenant's last task, of early's or late's.
func lastID(tenant string, early, late []string) string {
	if tenant == "early" {
		return early[len(early)-1]
	}
	return late[len(late)-1]
}

var _ = admission.Quota{}
