package admission_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/freshid"
	"github.com/admitq/admitq/internal/redistest"
)

// lossyRemovals fails the first fail ZREMs, alone or in pipelines,
// without sending them, as a removal that times out before it leaves the
// process does under load; and holds each script pipeline's reply for
// hold, so that callers with shorter deadlines leave after their script
// ran.
type lossyRemovals struct {
	fail    atomic.Int64
	failed  atomic.Int64
	hold    atomic.Int64 // time.Duration
	removes atomic.Int64 // ZREMs that reached Redis
	scripts atomic.Int64 // script pipelines answered
}

func (h *lossyRemovals) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lossyRemovals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "zrem" {
			return next(ctx, cmd)
		}
		if h.fail.Add(-1) >= 0 {
			h.failed.Add(1)
			cmd.SetErr(context.DeadlineExceeded)
			return cmd.Err()
		}
		h.removes.Add(1)
		return next(ctx, cmd)
	}
}

func (h *lossyRemovals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 {
			return next(ctx, cmds)
		}
		zrem := cmds[0].Name() == "zrem"
		if zrem && h.fail.Add(-1) >= 0 {
			h.failed.Add(1)
			for _, c := range cmds {
				c.SetErr(context.DeadlineExceeded)
			}
			return context.DeadlineExceeded
		}
		if zrem {
			h.removes.Add(1)
		}
		err := next(ctx, cmds)
		if name := cmds[0].Name(); name == "evalsha" || name == "eval" {
			time.Sleep(time.Duration(h.hold.Load()))
			h.scripts.Add(1)
		}
		return err
	}
}

// TestFreshSlotsGivenBackThoughRemovalsFail: the slot of an ID that no
// one else can hold (one the gate made, or one package enqueue made and
// marked fresh) is given back even when the removal fails a few times,
// as removals sent with the gate's timeout do on a loaded machine, for a
// caller that left before its decision arrived and for a Release. (Before,
// one failed ZREM left the slot taken until its window passed: 16-66
// slots without a task in TestShortDeadlinesLeaveNoSlotWithoutTask at load
// 10-15.) A caller's own ID is not removed behind its back: a retry with
// it may be admitted again meanwhile.
func TestFreshSlotsGivenBackThoughRemovalsFail(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	q := admission.Quota{Limit: 1000, Window: time.Minute}
	entries := func(tenant string) int64 { return rdb.ZCard(t.Context(), "admitq:{"+tenant+"}:log").Val() }
	settled := func(t *testing.T, tenant string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); entries(tenant) != 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d entries of %q left, want none", entries(tenant), tenant)
			}
		}
	}
	newGate := func(t *testing.T, fail int64) (*admission.Gate, *lossyRemovals) {
		h := &lossyRemovals{}
		h.fail.Store(fail)
		c := srv.Client(t)
		c.AddHook(h)
		g := admission.New(c, static(q))
		t.Cleanup(func() { _ = g.Close() })
		return g, h
	}

	t.Run("caller left", func(t *testing.T) {
		g, h := newGate(t, 3)
		if _, err := g.Admit(t.Context(), "warm"); err != nil { // the version check and connections, before the deadlines
			t.Fatal(err)
		}
		h.hold.Store(int64(150 * time.Millisecond))
		// Callers that leave while their scripts' replies are held, the
		// gate's own ID and one marked fresh; again should a caller leave
		// before its request was even sent (a loaded machine).
		for i, sent := 0, h.scripts.Load(); h.scripts.Load() < sent+2 && i < 10; i++ {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Millisecond)
			var err error
			if i%2 == 1 {
				id := "task-" + strconv.Itoa(i)
				_, err = g.AdmitID(freshid.Mark(ctx, id), "left", id)
			} else {
				_, err = g.Admit(ctx, "left")
			}
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Admit with a deadline shorter than the reply = %v, want context.DeadlineExceeded", err)
			}
			time.Sleep(150 * time.Millisecond) // its reply, if it was sent
		}
		waitFor(t, 5*time.Second, "a removal to fail", func() bool { return h.failed.Load() > 0 })
		settled(t, "left")
	})

	t.Run("release", func(t *testing.T) {
		g, h := newGate(t, 0)
		var ds []admission.Decision
		for _, marked := range []bool{false, true} {
			ctx := t.Context()
			var d admission.Decision
			var err error
			if marked {
				d, err = g.AdmitID(freshid.Mark(ctx, "task-2"), "released", "task-2")
			} else {
				d, err = g.Admit(ctx, "released")
			}
			if err != nil {
				t.Fatal(err)
			}
			ds = append(ds, d)
		}
		h.fail.Store(1 << 30) // until both have failed
		for i, d := range ds {
			ctx := t.Context()
			if i == 1 {
				ctx = freshid.Mark(ctx, d.ID)
			}
			if err := g.Release(ctx, d); !errors.Is(err, admission.ErrUnavailable) {
				t.Fatalf("Release with its ZREM failing = %v, want ErrUnavailable", err)
			}
		}
		h.fail.Store(0)
		settled(t, "released")
	})

	t.Run("caller's own ID", func(t *testing.T) {
		g, h := newGate(t, 0)
		d, err := g.AdmitID(t.Context(), "own", "mine")
		if err != nil {
			t.Fatal(err)
		}
		h.fail.Store(1)
		if err := g.Release(t.Context(), d); !errors.Is(err, admission.ErrUnavailable) {
			t.Fatalf("Release with its ZREM failing = %v, want ErrUnavailable", err)
		}
		time.Sleep(500 * time.Millisecond) // past a few retries, were there any
		if n := h.removes.Load(); n != 0 || entries("own") != 1 {
			t.Errorf("%d removals reached Redis and %d entries are left, want none and the caller's one", n, entries("own"))
		}
	})
}
