package enqueue_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
)

// loadingHook answers asynq's script writes, once they have run, with the
// LOADING error a Redis gives while it loads its data after a restart: the
// reply to a go-redis retry of a write that ran before the restart.
type loadingHook struct{}

// loadingError is a Redis error reply.
type loadingError struct{}

func (loadingError) Error() string { return "LOADING Redis is loading the dataset in memory" }
func (loadingError) RedisError()   {}

func (loadingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (loadingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n != "evalsha" && n != "eval" {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		cmd.SetErr(loadingError{})
		return cmd.Err()
	}
}
func (loadingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "evalsha" {
			return next(ctx, cmds)
		}
		if err := next(ctx, cmds); err != nil {
			return err
		}
		for _, c := range cmds {
			c.SetErr(loadingError{})
		}
		return nil
	}
}

// TestIsAmbiguous: an error after which the task may be in the queue says
// so, and holds its slot; a definite one does not.
func TestIsAmbiguous(t *testing.T) {
	bg := context.Background()
	t.Run("LOADING for a write that ran", func(t *testing.T) {
		for _, batching := range []bool{true, false} {
			l := newLive(t, liveConfig{quota: roomy, asynqHook: loadingHook{}, opts: []enqueue.Option{enqueue.WithBatching(batching)}})
			_, _, err := l.client.Enqueue(bg, "acme", asynq.NewTask("t", nil), asynq.TaskID("L"))
			if err == nil || !enqueue.IsAmbiguous(err) {
				t.Errorf("batching %v: Enqueue = %v, want an ambiguous error", batching, err)
			}
			if tasks, slots := l.unheld(t); len(tasks)+len(slots) > 0 || len(l.tasks(t)) != 1 {
				t.Errorf("batching %v: tasks %q, without a slot %q, slots without a task %q; want L, holding its slot",
					batching, l.tasks(t), tasks, slots)
			}
		}
	})
	t.Run("definite", func(t *testing.T) {
		l := newLive(t, liveConfig{quota: admission.Quota{Limit: 1, Window: time.Minute}})
		if _, _, err := l.client.Enqueue(bg, "acme", asynq.NewTask("t", nil)); err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(bg)
		cancel()
		for desc, err := range map[string]error{
			"rejected":        second(l.client.Enqueue(bg, "acme", asynq.NewTask("t", nil))),
			"invalid tenant":  second(l.client.Enqueue(bg, "", asynq.NewTask("t", nil))),
			"ctx done before": second(l.client.Enqueue(done, "other", asynq.NewTask("t", nil))),
		} {
			if err == nil || enqueue.IsAmbiguous(err) {
				t.Errorf("%s: err = %v, want a definite error", desc, err)
			}
		}
		if enqueue.IsAmbiguous(nil) {
			t.Error("IsAmbiguous(nil) = true")
		}
	})
}

func second(_ *asynq.TaskInfo, _ admission.Decision, err error) error { return err }

// TestUniqueWritesAcrossKilledConnections is the end-to-end form of
// TestReplayedUniqueWriteKeepsItsSlot: 32 goroutines enqueue Unique tasks
// over many tenants while CLIENT KILL cuts every connection every 20 ms, so
// go-redis retries writes whose replies were lost. Every task in asynq must
// hold its slot, and no tenant may hold more tasks than its limit and
// MaxDelay allow.
func TestUniqueWritesAcrossKilledConnections(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			q := admission.Quota{Limit: 5, Window: 10 * time.Minute, MaxDelay: 50 * time.Minute}
			l := newLive(t, liveConfig{quota: q, opts: []enqueue.Option{enqueue.WithBatching(batching)}})
			killer := l.srv.Client(t)
			bg := context.Background()
			stop := make(chan struct{})
			var kills atomic.Int64
			var wg sync.WaitGroup
			wg.Go(func() {
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if n, err := killer.ClientKillByFilter(bg, "TYPE", "normal", "SKIPME", "yes").Result(); err == nil {
							kills.Add(n)
						}
					}
				}
			})
			var n atomic.Int64
			until := time.Now().Add(time.Second)
			var producers sync.WaitGroup
			for g := range 32 {
				producers.Go(func() {
					for i := 0; time.Now().Before(until); i++ {
						k := n.Add(1)
						tenant := fmt.Sprintf("t%d", (int(k)+g)%40)
						task := asynq.NewTask("u", fmt.Appendf(nil, "%d", k), asynq.Unique(time.Hour))
						_, _, _ = l.client.Enqueue(bg, tenant, task)
					}
				})
			}
			producers.Wait()
			close(stop)
			wg.Wait()
			tasks, slots := l.unheld(t)
			t.Logf("%d calls, %d connections killed; %d tasks in asynq, %d without a slot; %d slots without a task",
				n.Load(), kills.Load(), len(l.tasks(t)), len(tasks), len(slots))
			if len(tasks) > 0 {
				t.Errorf("%d tasks in asynq hold no slot, want none: %q", len(tasks), tasks[:min(len(tasks), 5)])
			}
			if kills.Load() == 0 {
				t.Error("no connection was killed")
			}
		})
	}
}
