package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
)

// A parked task with an asynq.Deadline that an operator deletes leaves its
// deadline with the dispatcher beside its stale entry. Its ID enqueued
// again without a deadline is a new task, which runs at its turn: it does
// not inherit the old task's deadline (it did, and was archived unrun).
func TestAReusedIDDoesNotInheritAnOldDeadline(t *testing.T) {
	s := newStack(t, capped1)
	s.setQuota("t", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
	s.startWorker(4, true)
	s.put("t", "x", "block")
	eventually(t, 5*time.Second, "x holds t's cap", func() bool { return s.ran("x") == 1 })
	if d := s.put("t", "a", "10ms", asynq.Deadline(time.Now().Add(time.Second))); d.Outcome != admission.Parked {
		t.Fatalf("a: %v, want parked behind x", d.Outcome)
	}
	if err := s.ins.DeleteTask("default", "a"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)                              // the deleted task's deadline passes
	if d := s.put("t", "a", "10ms"); d.Outcome != admission.Parked { // no deadline
		t.Fatalf("a again: %v, want parked behind x", d.Outcome)
	}
	t.Cleanup(func() {
		info, err := s.ins.GetTaskInfo("default", "a")
		if err == nil {
			t.Logf("a's state at the end: %v", info.State)
		}
	})
	s.unblock("x")
	eventually(t, 8*time.Second, "a, enqueued again without a deadline, runs", func() bool { return s.ran("a") == 1 })
}

// An entry newer than its ID's record passes: one written by an older
// version's park (a rolling upgrade), beside a record an earlier task of
// the ID left behind (its finish ran in the older version, which knows
// nothing of own). It was dropped as stale, and its task stayed parked for
// ever. The older producer's park is played by this one's, with its
// record put back as the earlier task left it.
func TestAnEntryNewerThanItsIDsRecordIsNotStale(t *testing.T) {
	s := newStack(t, capped1)
	s.setQuota("u", admission.Quota{Limit: admission.NoLimit, Paused: true})
	s.startWorker(4, true)
	ctx := context.Background()
	own := "admitq:fair:{default}:own"
	if d := s.put("u", "a", "10ms"); d.Outcome != admission.Parked {
		t.Fatalf("a: %v, want parked (u is paused)", d.Outcome)
	}
	left, err := s.rdb.ZScore(ctx, own, "a").Result()
	if err != nil {
		t.Fatalf("a's record: %v", err)
	}
	// The earlier task's record, one second older than the entry's park.
	if err := s.rdb.ZAdd(ctx, own, redis.Z{Score: left - 1e6, Member: "a"}).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		info, err := s.ins.GetTaskInfo("default", "a")
		n := s.rdb.LLen(ctx, "admitq:fair:{default}:w:u").Val()
		if err == nil {
			t.Logf("a's state at the end: %v, next process at %v; u's line holds %d entries", info.State, info.NextProcessAt, n)
		}
	})
	s.setQuota("u", admission.Quota{Limit: admission.NoLimit})
	eventually(t, 8*time.Second, "a runs once u is resumed", func() bool { return s.ran("a") == 1 })
}

// A rollback (a task counted as let in that asynq keeps parked again, as
// after a restart from a snapshot) puts the task back in its line under a
// new entry, and keeps its ID's record: a stale entry of the reused ID,
// still in another tenant's line, still lets nothing in. (The record went
// with the rollback, and the stale entry let the task in under the old
// tenant, past the new one's pause.)
func TestARollbackKeepsOlderEntriesOfItsIDStale(t *testing.T) {
	s := newStack(t, capped1)
	s.setQuota("t", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
	ctx := context.Background()
	parkAndDelete(t, s)
	if d := s.put("u", "a", "10ms"); d.Outcome != admission.Parked {
		t.Fatalf("a again, for paused u: %v, want parked", d.Outcome)
	}
	p := "admitq:fair:{default}:"
	e, err := s.rdb.LIndex(ctx, p+"w:u", 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(pp redis.Pipeliner) error {
		pp.LRem(ctx, p+"w:u", 1, e)
		pp.HSet(ctx, p+"run", "a", fmt.Sprintf("p|0|%d|u", time.Now().Add(-time.Minute).UnixMicro()))
		pp.HIncrBy(ctx, p+"t:u", "n", 1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 8*time.Second, "the repair pass puts a back in u's line", func() bool {
		return s.rdb.HExists(ctx, p+"run", "a").Val() == false && s.rdb.LLen(ctx, p+"w:u").Val() == 1
	})
	s.unblock("x") // t's turn meets a's stale entry
	time.Sleep(3 * time.Second)
	if n := s.ran("a"); n != 0 {
		t.Fatalf("a, waiting for paused tenant u, ran %d times: t's stale entry let it in after the rollback", n)
	}
}
