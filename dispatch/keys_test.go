package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/worker"
)

// These tests run concurrency keys, priority and key pauses and throttles
// through a real fair (or capped) worker on redis-server, and check
// properties that hold at every moment (caps, order, nothing run twice),
// not timings.

// setKey sets key's quota and waits until the gate reads it.
func (s *stack) setKey(key string, q admission.Quota) {
	s.t.Helper()
	ctx := context.Background()
	if err := s.quotas.SetKey(ctx, key, q); err != nil {
		s.t.Fatal(err)
	}
	eventually(s.t, 5*time.Second, "the gate reads key "+key+"'s quota", func() bool {
		got, ok, err := s.gate.KeyQuota(ctx, key)
		return err == nil && ok && got == q
	})
}

// keyWatch records what a worker's handler ran, by task and by key: it is
// the handler of the workers the key tests start. Its payloads: "block"
// waits for unblock; "throttle-key:<key>:<d>" returns worker.ThrottledKey
// on its first run; anything else is a duration to sleep.
type keyWatch struct {
	mu      sync.Mutex
	runs    map[string]int       // task ID -> starts
	taken   map[string]time.Time // task ID -> when asynq first took it (see ProcessTask)
	tenant  map[string]string    // task ID -> tenant
	first   map[string]time.Time // task ID -> its first start
	last    map[string]time.Time // task ID -> its last start
	running map[string]int       // "<queue>/<key>" ("*/<key>": all queues) -> tasks running now
	peak    map[string]int       // "<queue>/<key>" ("*/<key>": all queues) -> most running at once
	inRedis map[string]int       // "<queue>/<key>" -> most pending or active at once, sampled
	blocks  map[string]chan struct{}
	keysOf  sync.Map // task ID -> []string, for the sampler
}

func newKeyWatch() *keyWatch {
	return &keyWatch{
		runs: map[string]int{}, taken: map[string]time.Time{}, tenant: map[string]string{}, first: map[string]time.Time{}, last: map[string]time.Time{},
		running: map[string]int{}, peak: map[string]int{}, inRedis: map[string]int{}, blocks: map[string]chan struct{}{},
	}
}

func (w *keyWatch) gateFor(id string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch, ok := w.blocks[id]
	if !ok {
		ch = make(chan struct{})
		w.blocks[id] = ch
	}
	return ch
}

func (w *keyWatch) unblock(id string) { close(w.gateFor(id)) }

func (w *keyWatch) ran(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runs[id]
}

// ProcessTask runs t, counting its keys while it runs, and notes when asynq
// took it (takenAt), since handlers do not start in that order.
func (w *keyWatch) ProcessTask(ctx context.Context, t *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	queue, _ := asynq.GetQueueName(ctx)
	keys := worker.Keys(ctx)
	now := time.Now()
	w.mu.Lock()
	w.runs[id]++
	firstRun := w.runs[id] == 1
	w.tenant[id] = worker.Tenant(ctx)
	if firstRun {
		w.first[id] = now
		w.taken[id] = takenAt(ctx)
	}
	w.last[id] = now
	for _, k := range keys {
		for _, qk := range []string{queue + "/" + k, "*/" + k} {
			w.running[qk]++
			w.peak[qk] = max(w.peak[qk], w.running[qk])
		}
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		for _, k := range keys {
			w.running[queue+"/"+k]--
			w.running["*/"+k]--
		}
		w.mu.Unlock()
	}()
	p := string(t.Payload())
	if rest, ok := strings.CutPrefix(p, "throttle-key:"); ok {
		if !firstRun {
			return nil
		}
		key, d, _ := strings.Cut(rest, ":")
		hold, _ := time.ParseDuration(d)
		return worker.ThrottledKey(key, hold)
	}
	if p == "block" {
		select {
		case <-w.gateFor(id):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	d, _ := time.ParseDuration(p)
	time.Sleep(d)
	return nil
}

// startOn starts a worker with gate on queues of rdb, with w as its
// handler.
func (w *keyWatch) startOn(t *testing.T, rdb redis.UniversalClient, gate *admission.Gate, queues []string, concurrency int, fair bool) {
	t.Helper()
	qs := map[string]int{}
	for _, q := range queues {
		qs[q] = 1
	}
	wk := worker.NewFromRedis(rdb, worker.Config{
		Queues: qs, Concurrency: concurrency, Gate: gate, Fair: fair,
		RetryDelayFunc:  func(int, error, *asynq.Task) time.Duration { return 0 },
		ShutdownTimeout: 2 * time.Second,
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err := wk.Start(w); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wk.Shutdown)
}

// put enqueues a task of tenant in queue with payload p and ID id through
// c, noting its keys for the sampler, and returns the gate's decision.
func (w *keyWatch) put(t *testing.T, c *enqueue.Client, queue, tenant, id, p string, keys []string, opts ...asynq.Option) admission.Decision {
	t.Helper()
	w.keysOf.Store(id, keys)
	opts = append(opts, asynq.TaskID(id), asynq.Queue(queue))
	if len(keys) > 0 {
		opts = append(opts, enqueue.Keys(keys...))
	}
	_, d, err := c.Enqueue(context.Background(), tenant, asynq.NewTask("work", []byte(p)), opts...)
	if err != nil {
		t.Fatalf("enqueue %s: %v", id, err)
	}
	return d
}

// sample reads, every few ms until the test ends, queue's pending and
// active lists in one transaction and the dispatcher's key records, and
// keeps per key the most of its tasks asynq held pending or active at once
// and fails t when the dispatcher counts more of a key's tasks in flight
// than its cap.
func (w *keyWatch) sample(t *testing.T, rdb redis.UniversalClient, gate *admission.Gate, queue string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	disp := dispatch.New(rdb, gate, nil)
	go func() {
		defer close(done)
		for i := 0; ctx.Err() == nil; i++ {
			var pending, active *redis.StringSliceCmd
			_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				pending = p.LRange(ctx, "asynq:{"+queue+"}:pending", 0, -1)
				active = p.LRange(ctx, "asynq:{"+queue+"}:active", 0, -1)
				return nil
			})
			if err == nil {
				n := map[string]int{}
				for _, id := range append(pending.Val(), active.Val()...) {
					if ks, ok := w.keysOf.Load(id); ok {
						for _, k := range ks.([]string) {
							n[k]++
						}
					}
				}
				w.mu.Lock()
				for k, c := range n {
					w.inRedis[queue+"/"+k] = max(w.inRedis[queue+"/"+k], c)
				}
				w.mu.Unlock()
			}
			if i%10 == 0 {
				if qs, err := disp.Stats(ctx, queue); err == nil {
					for _, ks := range qs.Keys {
						if ks.Cap > 0 && ks.InFlight > ks.Cap {
							t.Errorf("queue %s: the dispatcher counts %d tasks of key %s in flight, over its cap %d", queue, ks.InFlight, ks.Key, ks.Cap)
						}
					}
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
}

// waitRuns waits until every id has run, and fails on any run twice.
func (w *keyWatch) waitRuns(t *testing.T, ids []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		w.mu.Lock()
		var left []string
		for _, id := range ids {
			switch w.runs[id] {
			case 0:
				left = append(left, id)
			case 1:
			default:
				w.mu.Unlock()
				t.Fatalf("task %s ran %d times", id, w.runs[id])
			}
		}
		w.mu.Unlock()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d tasks never ran within %v: %v", len(left), len(ids), within, left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// takenOf lists the IDs among ids that have run in the order asynq first
// took them. Not for tasks with an asynq.Deadline.
func (w *keyWatch) takenOf(t *testing.T, ids []string) []string {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	ran := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return w.runs[id] == 0 })
	return inTakenOrder(t, ran, w.taken)
}

// A key capped at 2, carried by the tasks of four tenants, never has more
// than 2 of them pending or active at once (sampled in asynq's lists, in
// the dispatcher's count and in the handler), in a fair queue and in one
// that is not; tasks without the key run beside them; every task runs
// once.
func TestKeyCapHoldsPendingAndActiveAcrossTenants(t *testing.T) {
	for _, fair := range []bool{true, false} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			s := newStack(t, generous)
			s.setKey("api", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 2})
			w := newKeyWatch()
			w.sample(t, s.rdb, s.gate, "default")
			w.startOn(t, s.rdb, s.gate, []string{"default"}, 8, fair)
			time.Sleep(1100 * time.Millisecond) // producers see the worker
			var keyed, keyless []string
			for i := range 8 {
				for _, tenant := range []string{"a", "b", "c", "d"} {
					id := fmt.Sprintf("%s-api-%d", tenant, i)
					w.put(t, s.client, "default", tenant, id, "15ms", []string{"api"})
					keyed = append(keyed, id)
					if i%2 == 0 {
						id = fmt.Sprintf("%s-free-%d", tenant, i)
						w.put(t, s.client, "default", tenant, id, "15ms", nil)
						keyless = append(keyless, id)
					}
				}
			}
			w.waitRuns(t, append(keyed, keyless...), 30*time.Second)
			time.Sleep(100 * time.Millisecond) // a late second run would show
			w.waitRuns(t, append(keyed, keyless...), 0)
			w.mu.Lock()
			defer w.mu.Unlock()
			if p := w.peak["default/api"]; p != 2 {
				t.Errorf("at most %d tasks of key api ran at once, want its cap of 2, reached and never passed", p)
			}
			if p := w.inRedis["default/api"]; p > 2 || p < 1 {
				t.Errorf("at most %d tasks of key api were pending or active at once, want 1 to its cap of 2", p)
			}
			t.Logf("key api: %d running, %d pending or active at most", w.peak["default/api"], w.inRedis["default/api"])
		})
	}
}

// A tenant whose keyed tasks wait on a full key and on a paused key still
// gets its tasks without those keys run, and tasks carrying other keys;
// another tenant's tasks are not held back either. A tenant whose every
// task waited on the key, and so left the runnable tenants, comes back for
// a task without it. Once the key has room, its tasks run.
func TestFullOrPausedKeyHoldsNoOtherTask(t *testing.T) {
	for _, tc := range []struct {
		desc string
		fair bool
		cap  int // tenant a's cap
	}{
		{"fair queue", true, 0},
		{"capped tenant, queue not fair", false, 4},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			s := newStack(t, generous)
			s.setKey("full", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
			s.setKey("pz", admission.Quota{Limit: admission.NoLimit, Paused: true})
			if tc.cap > 0 {
				s.setQuota("a", admission.Quota{Limit: admission.NoLimit, MaxInFlight: tc.cap})
			}
			w := newKeyWatch()
			w.startOn(t, s.rdb, s.gate, []string{"default"}, 4, tc.fair)
			time.Sleep(1100 * time.Millisecond)
			w.put(t, s.client, "default", "a", "blocker", "block", []string{"full"})
			eventually(t, 5*time.Second, "the blocker runs", func() bool { return w.ran("blocker") == 1 })
			var held []string
			for i := range 5 {
				for _, k := range []string{"full", "pz"} {
					id := fmt.Sprintf("a-%s-%d", k, i)
					w.put(t, s.client, "default", "a", id, "1ms", []string{k})
					held = append(held, id)
				}
			}
			// A turn finds a's every flow on a closed key, and takes a out.
			time.Sleep(300 * time.Millisecond)
			var free []string
			for i := range 10 {
				for _, p := range []struct {
					tenant string
					keys   []string
				}{{"a", nil}, {"a", []string{"other"}}, {"b", nil}, {"b", []string{"full"}}} {
					id := fmt.Sprintf("%s-%v-%d", p.tenant, p.keys, i)
					w.put(t, s.client, "default", p.tenant, id, "2ms", p.keys)
					if slices.Contains(p.keys, "full") {
						held = append(held, id)
					} else {
						free = append(free, id)
					}
				}
			}
			w.waitRuns(t, free, 10*time.Second)
			for _, id := range held {
				if n := w.ran(id); n != 0 {
					t.Errorf("task %s of a full or paused key ran while the key was closed", id)
				}
			}
			w.unblock("blocker")
			s.setKey("pz", admission.Quota{Limit: admission.NoLimit})
			w.waitRuns(t, held, 15*time.Second)
			w.mu.Lock()
			defer w.mu.Unlock()
			if p := w.peak["default/full"]; p != 1 {
				t.Errorf("at most %d tasks of key full ran at once, want its cap of 1", p)
			}
		})
	}
}

// fillRoom occupies a fair queue of one worker: blocked tasks of tenant z
// in flight up to the queue's room, so that what is enqueued next waits
// for grants. It returns their IDs.
func fillRoom(t *testing.T, s *stack, w *keyWatch) []string {
	t.Helper()
	var zs []string
	for i := 0; ; i++ {
		id := fmt.Sprintf("z-%d", i)
		zs = append(zs, id)
		if d := w.put(t, s.client, "default", "z", id, "block", nil); d.Outcome == admission.Parked {
			return zs
		} else if i > 10 {
			t.Fatalf("z's tasks went in up to %s: the fair queue of one worker has no bound", id)
		}
	}
}

// Among a tenant's waiting tasks the higher priority goes first, first in,
// first out within a priority; and priority never moves a tenant ahead of
// another's turn: in a fair queue of one worker, two tenants of equal
// weight whose tasks wait at priorities 1000 and -1000 alternate.
func TestPriorityOrdersATenantButNotTenants(t *testing.T) {
	t.Run("capped tenant", func(t *testing.T) {
		s := newStack(t, generous)
		s.setQuota("t", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
		w := newKeyWatch()
		w.startOn(t, s.rdb, s.gate, []string{"default"}, 4, false)
		time.Sleep(1100 * time.Millisecond)
		w.put(t, s.client, "default", "t", "first", "block", nil)
		eventually(t, 5*time.Second, "the first task runs", func() bool { return w.ran("first") == 1 })
		prios := []int{0, 5, -3, 5, 10, 0, enqueue.MinPriority, enqueue.MaxPriority, -3, 10}
		var ids []string
		for i, p := range prios {
			id := fmt.Sprintf("p%d-%d", p, i)
			if d := w.put(t, s.client, "default", "t", id, "1ms", nil, enqueue.Priority(p)); d.Outcome != admission.Parked {
				t.Fatalf("%s: %v, want parked behind t's cap", id, d.Outcome)
			}
			ids = append(ids, id)
		}
		want := slices.Clone(ids)
		slices.SortStableFunc(want, func(a, b string) int { return prioOf(b) - prioOf(a) })
		w.unblock("first")
		w.waitRuns(t, ids, 10*time.Second)
		if got := w.takenOf(t, ids); !slices.Equal(got, want) {
			t.Errorf("t's tasks ran in the order %v, want %v", got, want)
		}
	})
	t.Run("fair queue", func(t *testing.T) {
		s := newStack(t, generous)
		w := newKeyWatch()
		w.startOn(t, s.rdb, s.gate, []string{"default"}, 1, true)
		time.Sleep(1100 * time.Millisecond)
		zs := fillRoom(t, s, w)
		var hi, lo []string
		for i := range 12 {
			// hi's tasks: priority 1000, with a few of its own lower ones
			// between, which go after all of its 1000s.
			p := enqueue.MaxPriority
			if i%4 == 3 {
				p = 0
			}
			id := fmt.Sprintf("p%d-hi-%d", p, i)
			if d := w.put(t, s.client, "default", "hi", id, "5ms", nil, enqueue.Priority(p)); d.Outcome != admission.Parked {
				t.Fatalf("%s: %v, want parked in the full queue", id, d.Outcome)
			}
			hi = append(hi, id)
			id = fmt.Sprintf("p%d-lo-%d", enqueue.MinPriority, i)
			if d := w.put(t, s.client, "default", "lo", id, "5ms", nil, enqueue.Priority(enqueue.MinPriority)); d.Outcome != admission.Parked {
				t.Fatalf("%s: %v, want parked in the full queue", id, d.Outcome)
			}
			lo = append(lo, id)
		}
		for _, id := range zs {
			w.unblock(id)
		}
		w.waitRuns(t, append(hi, lo...), 20*time.Second)
		wantHi := slices.Clone(hi)
		slices.SortStableFunc(wantHi, func(a, b string) int { return prioOf(b) - prioOf(a) })
		if got := w.takenOf(t, hi); !slices.Equal(got, wantHi) {
			t.Errorf("hi's tasks ran in the order %v, want %v", got, wantHi)
		}
		// One worker runs them in the order they were granted: while both
		// wait, neither tenant gets far ahead of the other. Shares follow
		// the worker time each task is measured to run, so a few tasks
		// measured long (a loaded machine, -race) let the other tenant a
		// grant or two further ahead; priority moving a tenant ahead would
		// run all twelve of hi's first.
		order := w.takenOf(t, append(hi, lo...))
		n := map[string]int{}
		for i, id := range order {
			tenant := "lo"
			if strings.Contains(id, "-hi-") {
				tenant = "hi"
			}
			n[tenant]++
			if n["hi"] < len(hi) && n["lo"] < len(lo) && (n["hi"]-n["lo"] > 4 || n["lo"]-n["hi"] > 4) {
				t.Fatalf("after %d starts, hi has %d and lo %d at equal weights: priority moved a tenant ahead of another's turn; order %v", i+1, n["hi"], n["lo"], order)
			}
		}
	})
}

// prioOf reads the priority in a task ID "p<priority>-...".
func prioOf(id string) int {
	var p int
	fmt.Sscanf(id, "p%d-", &p)
	return p
}

// A paused key holds its tasks, whatever their tenants, while tasks
// without it run; Stats shows it paused with its tasks waiting; resumed,
// its tasks run, each tenant's in the order they were enqueued.
func TestPausedKeyHoldsAcrossTenantsAndResumesInOrder(t *testing.T) {
	s := newStack(t, generous)
	paused := admission.Quota{Limit: admission.NoLimit, Paused: true}
	s.setKey("pz", paused)
	w := newKeyWatch()
	w.startOn(t, s.rdb, s.gate, []string{"default"}, 1, true) // one at a time: starts in the order they go in
	time.Sleep(1100 * time.Millisecond)
	held := map[string][]string{}
	var free []string
	for i := range 8 {
		for _, tenant := range []string{"a", "b", "c"} {
			id := fmt.Sprintf("%s-pz-%d", tenant, i)
			w.put(t, s.client, "default", tenant, id, "1ms", []string{"pz"})
			held[tenant] = append(held[tenant], id)
			id = fmt.Sprintf("%s-free-%d", tenant, i)
			w.put(t, s.client, "default", tenant, id, "1ms", nil)
			free = append(free, id)
		}
	}
	w.waitRuns(t, free, 10*time.Second)
	qs, err := dispatch.New(s.rdb, s.gate, nil).Stats(context.Background(), "default")
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(qs.Keys, func(ks dispatch.KeyStats) bool { return ks.Key == "pz" }); i < 0 || !qs.Keys[i].Paused || qs.Keys[i].Waiting != 24 || qs.Keys[i].InFlight != 0 {
		t.Errorf("Stats' keys with pz paused and 24 of its tasks waiting: %+v", qs.Keys)
	}
	for _, ids := range held {
		for _, id := range ids {
			if n := w.ran(id); n != 0 {
				t.Fatalf("task %s of a paused key ran %d times", id, n)
			}
		}
	}
	s.setKey("pz", admission.Quota{Limit: admission.NoLimit})
	for tenant, ids := range held {
		w.waitRuns(t, ids, 10*time.Second)
		if got := w.takenOf(t, ids); !slices.Equal(got, ids) {
			t.Errorf("tenant %s's tasks of the resumed key ran in the order %v, want %v", tenant, got, ids)
		}
	}
}

// worker.ThrottledKey holds every waiting task carrying the key, of any
// tenant, for about as long as it asked, and the throttled task is retried
// after it; tasks without the key, of the same tenants, run meanwhile.
func TestThrottledKeyHoldsTheKeyNotOthers(t *testing.T) {
	const hold = 2 * time.Second
	s := newStack(t, generous)
	w := newKeyWatch()
	w.startOn(t, s.rdb, s.gate, []string{"default"}, 4, true)
	time.Sleep(1100 * time.Millisecond)
	w.put(t, s.client, "default", "a", "throttled", "throttle-key:api:"+hold.String(), []string{"api"})
	eventually(t, 5*time.Second, "the throttled task runs", func() bool { return w.ran("throttled") == 1 })
	// Its handler has started; the throttle holds the key once the worker
	// hands it in.
	eventually(t, 5*time.Second, "the dispatcher holds key api", func() bool {
		return s.rdb.ZScore(context.Background(), "admitq:fair:{default}:ksleep", "api").Err() == nil
	})
	w.mu.Lock()
	throttled := w.first["throttled"]
	w.mu.Unlock()
	var keyed, free []string
	for i := range 4 {
		for _, tenant := range []string{"a", "b", "c"} {
			id := fmt.Sprintf("%s-api-%d", tenant, i)
			w.put(t, s.client, "default", tenant, id, "1ms", []string{"api"})
			keyed = append(keyed, id)
			id = fmt.Sprintf("%s-free-%d", tenant, i)
			w.put(t, s.client, "default", tenant, id, "1ms", nil)
			free = append(free, id)
			id = fmt.Sprintf("%s-db-%d", tenant, i)
			w.put(t, s.client, "default", tenant, id, "1ms", []string{"db"})
			free = append(free, id)
		}
	}
	w.waitRuns(t, free, 10*time.Second)
	w.waitRuns(t, keyed, 10*time.Second)
	eventually(t, 5*time.Second, "the throttled task runs again", func() bool { return w.ran("throttled") == 2 })
	w.mu.Lock()
	defer w.mu.Unlock()
	firstKeyed := w.last["throttled"]
	for _, id := range append(keyed, "throttled") {
		if d := w.last[id].Sub(throttled); d < hold-100*time.Millisecond {
			t.Errorf("task %s of the throttled key started %v after the throttle; want the key held %v", id, d, hold)
		}
		if w.last[id].Before(firstKeyed) {
			firstKeyed = w.last[id]
		}
	}
	// Held for 2s, the key's tasks start after every task without it:
	// those wait for nothing.
	for _, id := range free {
		if !w.first[id].Before(firstKeyed) {
			t.Errorf("task %s without the held key started %v after the throttle, not before the key's first task (%v): held by it", id, w.first[id].Sub(throttled), firstKeyed.Sub(throttled))
		}
	}
}

// dbState is the names of every key in a Redis and how many there are.
func dbState(t *testing.T, rdb *redis.Client) []string {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	n, err := rdb.DBSize(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return append(keys, fmt.Sprintf("dbsize=%d", n))
}

// Park refuses a task with a bad key, too many keys or a priority out of
// range with an error, and writes nothing to Redis; so does Enqueue.
func TestParkRefusesBadKeysAndPrioritiesWritingNothing(t *testing.T) {
	s := newStack(t, generous)
	hold, err := dispatch.New(s.rdb, s.gate, nil).Serve(dispatch.Worker{Queues: []string{"default"}, Concurrency: 2, Fair: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hold.Close)
	time.Sleep(1100 * time.Millisecond)
	d := dispatch.New(s.rdb, s.gate, nil)
	ctx := context.Background()
	// A first task, so that the queue holds state to keep.
	if _, err := d.Park(ctx, dispatch.Task{Queue: "default", Tenant: "a", ID: "ok", Keys: []dispatch.Key{{Name: "api"}}}, generous); err != nil {
		t.Fatal(err)
	}
	tooMany := make([]dispatch.Key, dispatch.MaxKeys+1)
	for i := range tooMany {
		tooMany[i] = dispatch.Key{Name: fmt.Sprintf("k%d", i)}
	}
	for _, tc := range []struct {
		desc string
		task dispatch.Task
		is   error
	}{
		{"an empty key", dispatch.Task{Keys: []dispatch.Key{{Name: ""}}}, admission.ErrInvalidKey},
		{"a key with a newline", dispatch.Task{Keys: []dispatch.Key{{Name: "a\nb"}}}, admission.ErrInvalidKey},
		{"a key with a tab", dispatch.Task{Keys: []dispatch.Key{{Name: "a\tb"}}}, admission.ErrInvalidKey},
		{"a key with DEL", dispatch.Task{Keys: []dispatch.Key{{Name: "a\x7fb"}}}, admission.ErrInvalidKey},
		{"a key of 257 bytes", dispatch.Task{Keys: []dispatch.Key{{Name: strings.Repeat("k", 257)}}}, admission.ErrInvalidKey},
		{"a key not UTF-8", dispatch.Task{Keys: []dispatch.Key{{Name: "a\xffb"}}}, admission.ErrInvalidKey},
		{"a bad key after a good one", dispatch.Task{Keys: []dispatch.Key{{Name: "api"}, {Name: "b\x00"}}}, admission.ErrInvalidKey},
		{"more than MaxKeys keys", dispatch.Task{Keys: tooMany}, dispatch.ErrInvalidTask},
		{"a key twice with two quotas", dispatch.Task{Keys: []dispatch.Key{{Name: "api", MaxInFlight: 1}, {Name: "api", MaxInFlight: 2}}}, dispatch.ErrInvalidTask},
		{"a negative key cap", dispatch.Task{Keys: []dispatch.Key{{Name: "api", MaxInFlight: -1}}}, dispatch.ErrInvalidTask},
		{"a priority above MaxPriority", dispatch.Task{Priority: dispatch.MaxPriority + 1}, dispatch.ErrInvalidTask},
		{"a priority below MinPriority", dispatch.Task{Priority: dispatch.MinPriority - 1}, dispatch.ErrInvalidTask},
		{"an ID past admission.MaxIDLen", dispatch.Task{ID: strings.Repeat("i", admission.MaxIDLen+1)}, dispatch.ErrInvalidTask},
	} {
		before := dbState(t, s.rdb)
		task := tc.task
		task.Queue, task.Tenant = "default", "a"
		if task.ID == "" {
			task.ID = "bad"
		}
		tk, err := d.Park(ctx, task, generous)
		if !errors.Is(err, tc.is) {
			t.Errorf("%s: Park = %+v, %v; want an error matching %v", tc.desc, tk, err, tc.is)
		}
		if after := dbState(t, s.rdb); !slices.Equal(before, after) {
			t.Errorf("%s: Park wrote to Redis: keys %v, then %v", tc.desc, before, after)
		}
	}
	// The bounds themselves are good.
	for _, p := range []int{dispatch.MinPriority, dispatch.MaxPriority} {
		if _, err := d.Park(ctx, dispatch.Task{Queue: "default", Tenant: "a", ID: fmt.Sprintf("p%d", p), Priority: p}, generous); err != nil {
			t.Errorf("Park at priority %d: %v", p, err)
		}
	}
	if _, err := d.Park(ctx, dispatch.Task{Queue: "default", Tenant: "a", ID: "max-keys", Keys: tooMany[:dispatch.MaxKeys]}, generous); err != nil {
		t.Errorf("Park with MaxKeys keys: %v", err)
	}
	if _, err := d.Park(ctx, dispatch.Task{Queue: "default", Tenant: "a", ID: "long-key", Keys: []dispatch.Key{{Name: strings.Repeat("k", 256)}}}, generous); err != nil {
		t.Errorf("Park with a key of 256 bytes: %v", err)
	}
}

// In a queue that no worker with a gate serves, keyed and prioritized
// tasks go Direct: nothing holds them, nothing of them is stored, and the
// producer logs that once.
func TestKeysAndPriorityGoDirectWhereNoGateServes(t *testing.T) {
	s := newStack(t, generous)
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d := dispatch.New(s.rdb, s.gate, log)
	ctx := context.Background()
	before := dbState(t, s.rdb)
	for i, task := range []dispatch.Task{
		{Keys: []dispatch.Key{{Name: "api", MaxInFlight: 1}}},
		{Keys: []dispatch.Key{{Name: "api", MaxInFlight: 1}}},
		{Keys: []dispatch.Key{{Name: "pz", Paused: true}}},
		{Priority: 7},
		{Priority: -7, Keys: []dispatch.Key{{Name: "api", MaxInFlight: 1}}},
	} {
		task.Queue, task.Tenant, task.ID = "default", "a", fmt.Sprintf("t%d", i)
		tk, err := d.Park(ctx, task, generous)
		if err != nil || tk.Verdict != dispatch.Direct {
			t.Errorf("task %d (%+v): Park = %v, %v; want Direct", i, task, tk.Verdict, err)
		}
	}
	if after := dbState(t, s.rdb); !slices.Equal(before, after) {
		t.Errorf("Park of Direct tasks wrote to Redis: keys %v, then %v", before, after)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if n := strings.Count(out, "level=WARN"); n != 1 || !strings.Contains(out, "queue=default") {
		t.Errorf("logged %d warnings, want one naming the queue:\n%s", n, out)
	}

	// Through a producer: both go in at once, pending in asynq.
	w := newKeyWatch()
	for i, opts := range [][]asynq.Option{{enqueue.Priority(9)}, {enqueue.Priority(-9)}} {
		id := fmt.Sprintf("e%d", i)
		if dec := w.put(t, s.client, "default", "a", id, "1ms", []string{"api", "pz"}, opts...); dec.Outcome != admission.Admitted {
			t.Errorf("%s: %v, want admitted", id, dec.Outcome)
		}
		if info, err := s.ins.GetTaskInfo("default", id); err != nil || info.State != asynq.TaskStatePending {
			t.Errorf("%s: %+v, %v; want pending in asynq", id, info, err)
		}
	}
}

// lockedWriter is an io.Writer safe for concurrent use.
type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
