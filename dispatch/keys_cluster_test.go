package dispatch_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// On a 3-master Redis Cluster, with a real fair worker on two queues whose
// slots are on different masters: a key counts per queue, in the queue's
// slot (capped at 1, it runs one task in each queue at once, never two in
// one, and asynq never holds two pending or active in one); a paused key
// holds its tasks and, resumed, lets them in in order; a tenant capped at
// 1 runs its waiting tasks by priority.
func TestKeysPauseAndPriorityOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	cc := cl.Client(t)
	ctx := context.Background()
	quotas := admission.NewRedisQuotas(cc, admission.WithRefresh(50*time.Millisecond))
	if err := quotas.SetDefault(ctx, generous); err != nil {
		t.Fatal(err)
	}
	gate := admission.New(cc, quotas, admission.WithTimeout(2*time.Second))
	t.Cleanup(func() { gate.Close() })
	client := enqueue.NewFromRedis(cc, gate)
	setKey := func(key string, q admission.Quota) {
		t.Helper()
		if err := quotas.SetKey(ctx, key, q); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "the gate reads key "+key+"'s quota", func() bool {
			got, ok, err := gate.KeyQuota(ctx, key)
			return err == nil && ok && got == q
		})
	}
	capped := admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1}
	if err := quotas.Set(ctx, "prio", capped); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the gate reads prio's quota", func() bool {
		got, err := gate.Quota(ctx, "prio")
		return err == nil && got == capped
	})
	setKey("api", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
	setKey("pz", admission.Quota{Limit: admission.NoLimit, Paused: true})

	queues := twoQueuesOnTwoMasters(t, cl)
	w := newKeyWatch()
	for _, q := range queues {
		w.sample(t, cc, gate, q)
	}
	w.startOn(t, cc, gate, queues, 8, true)
	time.Sleep(1100 * time.Millisecond) // producers see the worker

	// Priority: prio's first task holds its cap while the rest wait.
	w.put(t, client, queues[0], "prio", "first", "block", nil)
	eventually(t, 10*time.Second, "prio's first task runs", func() bool { return w.ran("first") == 1 })
	var prios []string
	for i, p := range []int{0, 3, -1, 3, 9, 0} {
		id := fmt.Sprintf("p%d-%d", p, i)
		if d := w.put(t, client, queues[0], "prio", id, "1ms", nil, enqueue.Priority(p)); d.Outcome != admission.Parked {
			t.Fatalf("%s: %v, want parked behind prio's cap", id, d.Outcome)
		}
		prios = append(prios, id)
	}

	// Keys: api in both queues across three tenants, and pz, paused.
	var keyed, paused, free []string
	for i := range 10 {
		for _, q := range queues {
			for _, tenant := range []string{"a", "b", "c"} {
				id := fmt.Sprintf("%s-%s-api-%d", q, tenant, i)
				w.put(t, client, q, tenant, id, "10ms", []string{"api"})
				keyed = append(keyed, id)
			}
			id := fmt.Sprintf("%s-free-%d", q, i)
			w.put(t, client, q, "a", id, "5ms", nil)
			free = append(free, id)
			if i < 4 {
				id = fmt.Sprintf("%s-pz-%d", q, i)
				w.put(t, client, q, "b", id, "1ms", []string{"pz"})
				paused = append(paused, id)
			}
		}
	}
	w.unblock("first")
	w.waitRuns(t, append(append(keyed, free...), prios...), 30*time.Second)
	want := slices.Clone(prios)
	slices.SortStableFunc(want, func(a, b string) int { return prioOf(b) - prioOf(a) })
	if got := w.takenOf(t, prios); !slices.Equal(got, want) {
		t.Errorf("prio's tasks ran in the order %v, want %v", got, want)
	}
	for _, id := range paused {
		if n := w.ran(id); n != 0 {
			t.Fatalf("task %s of paused key pz ran", id)
		}
	}
	setKey("pz", admission.Quota{Limit: admission.NoLimit})
	w.waitRuns(t, paused, 15*time.Second)
	for _, q := range queues {
		var ids []string
		for _, id := range paused {
			if strings.HasPrefix(id, q+"-") {
				ids = append(ids, id)
			}
		}
		// Tenant b's tasks of one flow go in first in, first out.
		if got := w.takenOf(t, ids); !slices.Equal(got, ids) {
			t.Errorf("queue %s: the resumed key's tasks ran in the order %v, want %v", q, got, ids)
		}
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	for _, q := range queues {
		if p := w.peak[q+"/api"]; p != 1 {
			t.Errorf("queue %s: at most %d tasks of key api ran at once, want its cap of 1", q, p)
		}
		if p := w.inRedis[q+"/api"]; p != 1 {
			t.Errorf("queue %s: at most %d tasks of key api were pending or active at once, want its cap of 1", q, p)
		}
	}
	if p := w.peak["*/api"]; p != 2 {
		t.Errorf("at most %d tasks of key api ran at once in the two queues, want 2: the key counts per queue", p)
	}

	// asynq lists a queue named with a brace even when its writes failed
	// (CROSSSLOT): the dispatched queues are still listed, for status.
	if err := cc.SAdd(ctx, "asynq:queues", "}").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := dispatch.New(cc, gate, nil).Queues(ctx)
	if want := slices.Sorted(slices.Values(queues)); err != nil || !slices.Equal(got, want) {
		t.Errorf("Queues beside a queue named \"}\" = %v, %v; want %v", got, err, want)
	}
}

// twoQueuesOnTwoMasters names two queues whose hash tags are on different
// masters of cl.
func twoQueuesOnTwoMasters(t *testing.T, cl *redistest.Cluster) []string {
	t.Helper()
	cc := cl.Client(t)
	ctx := context.Background()
	owner := func(q string) string {
		slot, err := cc.ClusterKeySlot(ctx, "{"+q+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		shards, err := cc.ClusterShards(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if slot >= r.Start && slot <= r.End {
					return fmt.Sprint(sh.Nodes)
				}
			}
		}
		t.Fatalf("no master owns slot %d", slot)
		return ""
	}
	first := "keys-a"
	for i := range 100 {
		q := fmt.Sprintf("keys-%d", i)
		if owner(q) != owner(first) {
			return []string{first, q}
		}
	}
	t.Fatal("no queue name found on another master")
	return nil
}
