package enqueue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
)

// TestScheduledTaskChargedWhenItRuns is issue 11's A3: L=1 per 10s,
// MaxDelay 1m. Task A is enqueued with ProcessAt 20s ahead, then B and C
// plainly. A used to be charged at the enqueue, so B got +10s and C +20s,
// and asynq ran A and C together. Now A is charged at +20s, when it runs,
// and B and C queue behind it: every 10s holds one task, in both modes,
// through Enqueue and through EnqueueBatch.
func TestScheduledTaskChargedWhenItRuns(t *testing.T) {
	for _, mode := range []admission.Mode{admission.Log, admission.Counter} {
		for _, batch := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/batch=%v", mode, batch), func(t *testing.T) {
				q := admission.Quota{Limit: 1, Window: 10 * time.Second, MaxDelay: time.Minute, Mode: mode}
				f := newFixture(t, fixtureConfig{quota: q})
				ctx := context.Background()
				a := asynq.NewTask("test", nil, asynq.TaskID("A"), asynq.ProcessAt(sec(20).Add(300*time.Millisecond)))
				b := asynq.NewTask("test", nil, asynq.TaskID("B"))
				c := asynq.NewTask("test", nil, asynq.TaskID("C"))
				var ds []admission.Decision
				if batch {
					rs, err := f.client.EnqueueBatch(ctx, "acme", []*asynq.Task{a, b, c})
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range rs {
						if r.Err != nil {
							t.Fatal(r.Err)
						}
						ds = append(ds, r.Decision)
					}
				} else {
					for _, task := range []*asynq.Task{a, b, c} {
						_, d, err := f.client.Enqueue(ctx, "acme", task)
						if err != nil {
							t.Fatal(err)
						}
						ds = append(ds, d)
					}
				}
				if ds[0].Outcome != admission.Deferred || !ds[0].At.Equal(sec(20)) {
					t.Fatalf("A: %v at %v, want deferred to %v, the second asynq runs it at", ds[0].Outcome, ds[0].At, sec(20))
				}
				scores := map[string]int64{}
				zs, err := f.rdb.ZRangeWithScores(ctx, "asynq:{default}:scheduled", 0, -1).Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, z := range zs {
					scores[z.Member.(string)] = int64(z.Score)
				}
				runs := []int64{scores["A"], scores["B"], scores["C"]}
				if runs[0] != sec(20).Unix() {
					t.Fatalf("asynq runs A at %d, want %d", runs[0], sec(20).Unix())
				}
				for i := 1; i < len(runs); i++ {
					if runs[i]-runs[i-1] < 10 {
						t.Fatalf("asynq runs the tasks at %v (Unix seconds): two within the 10s window", runs)
					}
				}
			})
		}
	}
}

// TestScheduledTaskMaxDelayFromItsTime: MaxDelay counts from a task's own
// time. With MaxDelay 0 a task scheduled ahead on an idle tenant is
// deferred to its own time, not rejected; one scheduled into a window that
// is full is rejected, with the time a retry could succeed.
func TestScheduledTaskMaxDelayFromItsTime(t *testing.T) {
	q := admission.Quota{Limit: 1, Window: 10 * time.Second}
	f := newFixture(t, fixtureConfig{quota: q})
	ctx := context.Background()
	info, d, err := f.client.Enqueue(ctx, "acme", asynq.NewTask("test", nil), asynq.ProcessAt(sec(30)))
	if err != nil || d.Outcome != admission.Deferred || !d.At.Equal(sec(30)) || !info.NextProcessAt.Equal(sec(30)) {
		t.Fatalf("Enqueue = %+v, %+v, %v; want deferred to and run at %v", info, d, err, sec(30))
	}
	_, d, err = f.client.Enqueue(ctx, "acme", asynq.NewTask("test", nil), asynq.ProcessAt(sec(35)))
	var rej *enqueue.RejectedError
	if !errors.As(err, &rej) || d.Outcome != admission.Rejected {
		t.Fatalf("a second task 5s after the first: %+v, %v; want rejected", d, err)
	}
}
