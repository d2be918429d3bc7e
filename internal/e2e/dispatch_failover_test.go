//go:build unix

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/clusterboot"
	"github.com/admitq/admitq/internal/redistest"
)

const (
	// fairFailoverRecovery is the promise: once the new master serves the
	// queue's slot, tasks start and producers enqueue again within 2 s.
	fairFailoverRecovery = 2 * time.Second
	// fairFailoverAfter is how long the producers go on once the slot is
	// served again.
	fairFailoverAfter = 3 * time.Second
)

// fairRun is one run of a task's handler.
type fairRun struct {
	start, end time.Time
}

// fairCall is one Enqueue call of the producers.
type fairCall struct {
	tenant, id   string
	began, ended time.Time
	err          error
}

// TestFairQueueSurvivesFailover streams tasks of three tenants (weights
// 3:1:1) into a fair queue on a Redis Cluster of 3 masters and 3 replicas
// (cluster-node-timeout 1 s), and SIGKILLs the master that owns the
// queue's slot. Its replica takes the slot over within a few seconds; the
// dispatcher, the worker's asynq and the producers share their clients'
// view of which node serves the slot, which go-redis reads again on its
// own only every minute. Within fairFailoverRecovery of the new master
// serving the slot, tasks start again and every producer's calls succeed.
//
// Nothing is lost: every task whose Enqueue returned nil runs, except one
// whose call overlapped the last moment the replica was known to hold all
// of the master's writes and the kill (asynchronous replication may drop
// its writes with the master; the test counts them), and one that asynq
// dequeued at the kill and holds leased to a worker that never received it
// (asynq runs it once the lease lapses, 30 s on; see notDequeuedAtKill). A
// task runs more than once only if its first run began before the kill and
// ended after that moment: asynq's record that it finished may have died
// with the master, and asynq runs it again once its lease lapses.
//
// The tenants' logs are on the other masters, so that the gate's own
// failover (admission's breakers) is not what is measured.
func TestFairQueueSurvivesFailover(t *testing.T) {
	// The dead master's address leaves go-redis dialling it in the
	// background until its clients close (see VerifyNoLeaks).
	ignore := goleak.IgnoreCurrent()
	t.Run("SIGKILL", fairFailover)
	redistest.VerifyNoLeaks(t, ignore)
}

func fairFailover(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithReplicas(), redistest.WithNodeTimeout(time.Second))
	ctx := t.Context()
	const queue = "foq"
	cc := cl.Client(t)
	masterOfKey := func(key string) string {
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("MasterForKey(%q): %v", key, err)
		}
		return node.Options().Addr
	}
	victimAt := slices.Index(cl.Addrs(), masterOfKey("{"+queue+"}"))
	if victimAt < 0 {
		t.Fatalf("the master of {%s} is none of %v", queue, cl.Addrs())
	}
	victim, heir := cl.Nodes()[victimAt], cl.Replicas()[victimAt]

	weights := []float64{3, 1, 1}
	tenants := make([]string, len(weights))
	def := admission.Quota{Limit: 100_000, Window: time.Second}
	quotas := admission.StaticQuotas{Default: &def, Tenants: map[string]admission.Quota{}}
	for i, w := range weights {
		for n := 0; tenants[i] == ""; n++ {
			name := fmt.Sprintf("t%d-%d", i, n)
			if masterOfKey("{"+name+"}") != victim.Addr() {
				tenants[i] = name
			}
		}
		q := def
		q.Weight = w
		quotas.Tenants[tenants[i]] = q
	}

	s := buildStack(t, clusterBackend(cl), stackConfig{quotas: quotas, queue: queue, prefix: "fo"})
	var mu sync.Mutex
	runs := map[string][]fairRun{}
	cfg := testWorkerConfig(t, 4)
	cfg.Gate, cfg.Fair, cfg.TaskCheckInterval = s.gate, true, 5*time.Millisecond
	s.startWorker(t, cfg, asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		began := time.Now()
		id, _ := asynq.GetTaskID(ctx)
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		runs[id] = append(runs[id], fairRun{began, time.Now()})
		mu.Unlock()
		return nil
	}))
	time.Sleep(1100 * time.Millisecond) // producers see the fair worker

	stop := make(chan struct{})
	var calls []fairCall
	var wg sync.WaitGroup
	for _, tenant := range tenants {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				id := tenant + "-" + strconv.Itoa(i)
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				c := fairCall{tenant: tenant, id: id, began: time.Now()}
				_, _, c.err = s.enqueue(cctx, tenant, asynq.NewTask("work", nil), asynq.TaskID(id))
				cancel()
				c.ended = time.Now()
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
			}
		})
	}
	stopped := false
	stopProducers := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopProducers()

	time.Sleep(1500 * time.Millisecond) // a steady stream, a backlog in the fair queue
	synced := waitReplicated(t, victim, heir)
	victim.Kill()
	killed := time.Now()
	serving := waitServesSlot(t, heir, "{"+queue+"}", killed)
	t.Logf("the replica served {%s} %v after the SIGKILL (replica in sync %v before it)",
		queue, serving.Sub(killed).Round(10*time.Millisecond), killed.Sub(synced).Round(time.Millisecond))
	if err := cl.Serving(ctx); err != nil {
		t.Logf("when the replica first served the slot, the cluster as a whole did not yet: %v", err)
	}
	time.Sleep(fairFailoverAfter)
	stopProducers()

	// Every task enqueued runs, but give up early: without the recovery
	// nothing starts for close to a minute.
	mu.Lock()
	must := map[string]bool{} // tasks that must run
	var excused []string      // enqueued across the kill: replication may have lost them
	lastFailed, firstOK := map[string]time.Time{}, map[string]time.Time{}
	for _, c := range calls {
		tenant := c.tenant
		if c.err != nil {
			lastFailed[tenant] = maxTime(lastFailed[tenant], c.began)
			continue
		}
		if c.began.After(serving) && (firstOK[tenant].IsZero() || c.ended.Before(firstOK[tenant])) {
			firstOK[tenant] = c.ended
		}
		if c.began.Before(killed) && c.ended.After(synced) {
			excused = append(excused, c.id)
			continue
		}
		must[c.id] = true
	}
	mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		var missing []string
		for id := range must {
			if len(runs[id]) == 0 {
				missing = append(missing, id)
			}
		}
		mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			if lost := notDequeuedAtKill(t, cl.Client(t), queue, missing, func(id string) bool {
				mu.Lock()
				defer mu.Unlock()
				return len(runs[id]) > 0
			}, synced, killed); len(lost) > 0 {
				t.Errorf("%d of %d enqueued tasks never ran, %v after the replica served the queue's slot: %s",
					len(lost), len(must), time.Since(serving).Round(100*time.Millisecond), strings.Join(lost, "; "))
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	mu.Lock()
	defer mu.Unlock()
	var firstStart time.Time // the first start once the slot is served
	startedBefore := 0
	for id, rs := range runs {
		for _, r := range rs {
			if r.start.After(serving) && (firstStart.IsZero() || r.start.Before(firstStart)) {
				firstStart = r.start
			}
		}
		if rs[0].start.Before(killed) {
			startedBefore++
		}
		if len(rs) > 1 && !(rs[0].start.Before(killed) && rs[0].end.After(synced)) {
			t.Errorf("task %s ran %d times, and its first run was not under way at the kill: %+v", id, len(rs), rs)
		}
	}
	if startedBefore == 0 {
		t.Fatalf("no task ran before the kill")
	}
	switch {
	case firstStart.IsZero():
		t.Errorf("no task started in the %v after the replica served the queue's slot", time.Since(serving).Round(100*time.Millisecond))
	case firstStart.Sub(serving) > fairFailoverRecovery:
		t.Errorf("the first task started %v after the replica served the queue's slot, want within %v",
			firstStart.Sub(serving).Round(time.Millisecond), fairFailoverRecovery)
	default:
		t.Logf("the first task started %v after the replica served the queue's slot", firstStart.Sub(serving).Round(time.Millisecond))
	}
	var producersBack time.Duration
	for _, tenant := range tenants {
		producersBack = max(producersBack, firstOK[tenant].Sub(serving))
		switch ok := firstOK[tenant]; {
		case ok.IsZero():
			t.Errorf("tenant %s: no Enqueue begun after the replica served the queue's slot succeeded", tenant)
		case ok.Sub(serving) > fairFailoverRecovery:
			t.Errorf("tenant %s: the first Enqueue to succeed once the replica served the queue's slot returned %v after, want within %v",
				tenant, ok.Sub(serving).Round(time.Millisecond), fairFailoverRecovery)
		}
		if f := lastFailed[tenant]; f.Sub(serving) > fairFailoverRecovery {
			t.Errorf("tenant %s: an Enqueue begun %v after the replica served the queue's slot failed",
				tenant, f.Sub(serving).Round(time.Millisecond))
		}
	}
	t.Logf("every producer enqueued again %v after the replica served the queue's slot", producersBack.Round(time.Millisecond))
	lost := 0
	for _, id := range excused {
		if len(runs[id]) == 0 {
			lost++
		}
	}
	t.Logf("%d tasks enqueued and ran; %d enqueued across the kill, of which %d never ran (their writes may have died unreplicated with the master)",
		len(must), len(excused), lost)
}

// notDequeuedAtKill describes the tasks of ids that are lost, leaving out
// those asynq dequeued at the kill: a dequeue whose effect reached the
// replica and whose reply died with the master leaves its task in asynq's
// active list, leased to a worker that never received it. asynq's
// recoverer runs it once the lease lapses, 30 s on, which bare asynq does
// too; such a task is logged. Its lease says when it was dequeued: asynq
// leases a task for base.LeaseDuration (30 s) from the dequeue, in whole
// seconds, and only the worker that runs a task extends its lease.
func notDequeuedAtKill(t *testing.T, rdb *redis.ClusterClient, queue string, ids []string, ran func(id string) bool, synced, killed time.Time) []string {
	t.Helper()
	const leaseFor = 30 * time.Second
	inspector := asynq.NewInspectorFromRedisClient(rdb)
	var lost []string
	for _, id := range ids {
		if ran(id) {
			continue // it ran since it was missed
		}
		ti, err := inspector.GetTaskInfo(queue, id)
		if err != nil {
			lost = append(lost, fmt.Sprintf("%s: %v", id, err))
			continue
		}
		what := fmt.Sprintf("%s: %v, next %v", id, ti.State, ti.NextProcessAt.Format(time.StampMilli))
		if ti.State != asynq.TaskStateActive {
			lost = append(lost, what)
			continue
		}
		until, err := rdb.ZScore(context.Background(), "asynq:{"+queue+"}:lease", id).Result()
		if err != nil {
			lost = append(lost, fmt.Sprintf("%s, its lease: %v", what, err))
			continue
		}
		dequeued := time.Unix(int64(until), 0).Add(-leaseFor)
		if dequeued.Before(synced.Add(-time.Second)) || dequeued.After(killed.Add(time.Second)) {
			lost = append(lost, fmt.Sprintf("%s, dequeued at %v (the kill %v)", what,
				dequeued.Format(time.StampMilli), killed.Format(time.StampMilli)))
			continue
		}
		t.Logf("task %s was dequeued at the kill (lease until %v) and its reply died with the master: asynq runs it once its lease lapses",
			id, time.Unix(int64(until), 0).Format(time.Stamp))
	}
	return lost
}

// waitReplicated waits until replica has every write master had made when
// called, and returns when that was known.
func waitReplicated(t *testing.T, master, replica *redistest.Server) time.Time {
	t.Helper()
	mc, rc := redis.NewClient(master.Options()), redis.NewClient(replica.Options())
	defer mc.Close()
	defer rc.Close()
	offset := func(c *redis.Client, field string) int64 {
		info, err := c.Info(t.Context(), "replication").Result()
		if err != nil {
			t.Fatalf("INFO replication on %s: %v", c.Options().Addr, err)
		}
		n, err := strconv.ParseInt(clusterboot.InfoFields(info)[field], 10, 64)
		if err != nil {
			t.Fatalf("INFO replication on %s: %s: %v", c.Options().Addr, field, err)
		}
		return n
	}
	want := offset(mc, "master_repl_offset")
	deadline := time.Now().Add(waitLimit)
	for offset(rc, "slave_repl_offset") < want {
		if time.Now().After(deadline) {
			t.Fatalf("the replica %s did not reach the master's offset %d in %v", replica.Addr(), want, waitLimit)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Now()
}

// waitServesSlot waits until server answers a read of key itself, neither
// MOVED (it is still a replica) nor CLUSTERDOWN, and returns when it did.
func waitServesSlot(t *testing.T, server *redistest.Server, key string, since time.Time) time.Time {
	t.Helper()
	c := redis.NewClient(server.Options())
	defer c.Close()
	for {
		err := c.Exists(t.Context(), key).Err()
		if err == nil {
			return time.Now()
		}
		if time.Since(since) > waitLimit {
			t.Fatalf("%s does not serve %s %v after the master's SIGKILL: %v", server.Addr(), key, waitLimit, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
