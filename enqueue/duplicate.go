package enqueue

import (
	"context"

	"github.com/hibiken/asynq"
)

// duplicate tells what became of p's write that asynq refused with
// asynq.ErrDuplicateTask: unwritten when no task with p's ID is in asynq,
// since then another task holds the asynq.Unique lock; maybe when one is,
// or when asynq's Redis cannot say. The task is there when go-redis
// retried the write after losing the reply to an attempt that ran: the
// retry finds the lock that attempt took, for this very task.
//
// asynq writes the task and takes its lock in one script, and deletes the
// lock only once the task is done (or deleted), so the task's hash is there
// for as long as the lock the retry found.
func (c *Client) duplicate(p prepared) fate {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	n, err := c.rdb.Exists(ctx, taskKey(queueOf(p.opts), p.id)).Result()
	if err != nil || n > 0 {
		return maybe
	}
	return unwritten
}

// taskKey is asynq's key of the hash of task id in queue (asynq's
// base.TaskKey, in an internal package).
func taskKey(queue, id string) string {
	return "asynq:{" + queue + "}:t:" + id
}

// queueOf returns the queue opts put a task in, the last asynq.Queue
// winning, as in asynq; asynq's default queue without one.
func queueOf(opts []asynq.Option) string {
	q := "default"
	for _, o := range opts {
		if o != nil && o.Type() == asynq.QueueOpt {
			if s, ok := o.Value().(string); ok {
				q = s
			}
		}
	}
	return q
}
