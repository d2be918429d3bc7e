package dispatch

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// adoptScan is how many tasks of asynq's pending and active lists a
// repair pass looks at, each.
const adoptScan = 200

// adopt looks, while the dispatcher holds tasks in queue, for tasks that asynq holds
// pending or active and the dispatcher did not let in (run from outside
// with asynqmon's "run now" or Inspector.RunTask), and counts them against
// their tenants' places (fair_adopt.lua), so that a cap is true again
// within a repair pass. A task whose tenant the queue has no record of (a
// tenant the dispatcher does not hold back) is left alone.
func (d *Dispatcher) adopt(ctx context.Context, queue string) error {
	k := d.keysFor(queue)
	var waiting, sleeping, inFlight *redis.IntCmd
	var pending, active *redis.StringSliceCmd
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		waiting, sleeping, inFlight = p.ZCard(ctx, k.vt), p.ZCard(ctx, k.sleep), p.HLen(ctx, k.run)
		pending = p.LRange(ctx, k.pending, 0, adoptScan-1)
		active = p.LRange(ctx, k.active, 0, adoptScan-1)
		return nil
	})
	if err != nil {
		return fmt.Errorf("dispatch: queue %q: %w", queue, d.recoverFrom(err))
	}
	if waiting.Val()+sleeping.Val()+inFlight.Val() == 0 {
		return nil // the dispatcher holds nothing here: no tenant to count against
	}
	ids := append(pending.Val(), active.Val()...)
	inRun := make([]*redis.BoolCmd, len(ids))
	_, err = d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			inRun[i] = p.HExists(ctx, k.run, id)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dispatch: queue %q: %w", queue, d.recoverFrom(err))
	}
	var strays []string
	for i, id := range ids {
		if !inRun[i].Val() {
			strays = append(strays, id)
		}
	}
	if len(strays) == 0 {
		return nil
	}
	msgs := make([]*redis.StringCmd, len(strays))
	_, err = d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range strays {
			msgs[i] = p.HGet(ctx, k.taskPrefix+id, "msg")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("dispatch: queue %q: %w", queue, d.recoverFrom(err))
	}
	args := []any{0}
	for i, id := range strays {
		msg := []byte(msgs[i].Val())
		if tenant := taskHeader(msg, tenantHeader); tenant != "" {
			args = append(args, id, tenant, taskFlow(msg), taskDeadline(msg))
		}
	}
	if len(args) == 1 {
		return nil
	}
	args[0] = (len(args) - 1) / 4
	_, err = d.run(ctx, d.scripts.adopt, queue, args...)
	return err
}
