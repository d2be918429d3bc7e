package enqueue_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/internal/redistest"
)

// TestOutOfMemoryLeavesNoSlotWithoutATask fills a real redis-server to its
// maxmemory (noeviction) and then enqueues many tasks for many tenants:
// every slot in the tenants' logs must belong to a task in asynq. A slot
// without a task would lock its tenant out for as long as MaxDelay while
// the workers sit idle.
func TestOutOfMemoryLeavesNoSlotWithoutATask(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const tenants, perTenant = 20, 60
	q := admission.Quota{Limit: 20, Window: time.Minute, MaxDelay: time.Hour}
	gate := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithTimeout(2*time.Second))
	defer gate.Close()
	client := enqueue.NewFromRedis(rdb, gate)

	// Some tasks go in before memory runs out, then Redis is full.
	payload := []byte(strings.Repeat("x", 4096))
	enq := func(tenant string) error {
		_, _, err := client.Enqueue(ctx, tenant, asynq.NewTask("oom", payload))
		return err
	}
	for i := range tenants {
		if err := enq(fmt.Sprint("t", i)); err != nil {
			t.Fatal(err)
		}
	}
	used := usedMemory(t, rdb)
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", fmt.Sprint(used+256<<10)).Err(); err != nil {
		t.Fatal(err)
	}
	defer rdb.ConfigSet(ctx, "maxmemory", "0")

	var (
		wg             sync.WaitGroup
		mu             sync.Mutex
		ok, oom, ambig int
		firstOther     error
	)
	for i := range tenants {
		wg.Add(1)
		go func(tenant string) {
			defer wg.Done()
			for range perTenant {
				err := enq(tenant)
				mu.Lock()
				switch {
				case err == nil:
					ok++
				case enqueue.IsAmbiguous(err):
					ambig++
				case strings.Contains(err.Error(), "OOM"):
					oom++
				case firstOther == nil:
					firstOther = err
				}
				mu.Unlock()
			}
		}(fmt.Sprint("t", i))
	}
	wg.Wait()
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if oom == 0 {
		t.Fatalf("no call met OOM (%d enqueued): the test did not fill memory", ok)
	}

	var slots int64
	for i := range tenants {
		n, err := rdb.ZCard(ctx, fmt.Sprintf("admitq:{t%d}:log", i)).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots += n
	}
	tasks, err := rdb.Keys(ctx, "asynq:{default}:t:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("under OOM: %d enqueued, %d refused with OOM, %d ambiguous; %d slots in the logs for %d tasks: %d slots without a task",
		ok+tenants, oom, ambig, slots, len(tasks), slots-int64(len(tasks)))
	if firstOther != nil {
		t.Errorf("an error neither OOM nor ambiguous: %v", firstOther)
	}
	if slots != int64(len(tasks)) {
		t.Errorf("%d slots in the logs for %d tasks in asynq: %d slots without a task", slots, len(tasks), slots-int64(len(tasks)))
	}
	if ambig != 0 {
		t.Errorf("%d OOM refusals were reported ambiguous; Redis refuses a script for memory before it writes", ambig)
	}
}

// usedMemory returns Redis's used_memory, in bytes.
func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("INFO memory has no used_memory")
	return 0
}

// TestOutOfMemoryWriteGivesItsSlotBack admits on one Redis and writes the
// tasks to another that is full (noeviction): asynq's write is refused
// with OOM after the gate admitted it, so the task is certainly not in
// asynq; the error is not ambiguous and the slot goes back.
func TestOutOfMemoryWriteGivesItsSlotBack(t *testing.T) {
	gateRDB := redistest.Start(t).Client(t)
	asynqRDB := redistest.Start(t).Client(t)
	ctx := context.Background()
	q := admission.Quota{Limit: 100, Window: time.Minute, MaxDelay: time.Hour}
	gate := admission.New(gateRDB, admission.StaticQuotas{Default: &q})
	defer gate.Close()
	client := enqueue.NewFromRedis(asynqRDB, gate)
	// asynq registers the queue's name first: let it in before memory runs out.
	if _, _, err := client.Enqueue(ctx, "warm", asynq.NewTask("oom", nil)); err != nil {
		t.Fatal(err)
	}
	asynqRDB.ConfigSet(ctx, "maxmemory-policy", "noeviction")
	if err := asynqRDB.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		_, d, err := client.Enqueue(ctx, "t", asynq.NewTask("oom", []byte("payload")))
		switch {
		case err == nil:
			t.Fatalf("enqueue %d into a full Redis succeeded", i)
		case enqueue.IsAmbiguous(err):
			t.Fatalf("enqueue %d: %v is ambiguous; an OOM refusal wrote nothing", i, err)
		case !strings.Contains(err.Error(), "OOM"):
			t.Fatalf("enqueue %d: %v, want asynq's OOM", i, err)
		case d.Outcome != admission.Admitted:
			t.Fatalf("enqueue %d: the gate decided %v, want admitted", i, d.Outcome)
		}
	}
	if n := gateRDB.ZCard(ctx, "admitq:{t}:log").Val(); n != 0 {
		t.Errorf("the log holds %d slots for no task, want 0", n)
	}
}
