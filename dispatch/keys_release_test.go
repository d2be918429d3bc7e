package dispatch_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
)

// When a key gets room, every tenant waiting on it can go in, even when
// the first tenant the key lets back turns out to have nothing to run on
// it: its task there was deleted from outside, or its asynq.Deadline
// passed while it waited. The next tenant waiting on the key then gets its
// turn as any tenant does: not after another tenant's whole backlog, nor
// never (a key with room, a task waiting on it and a free worker must not
// coexist for long).
func TestKeyWithRoomLetsInTheNextBlockedTenant(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		backlog int                       // tasks of tenant c, without keys, waiting meanwhile
		gone    func(s *stack, id string) // nil: a's task has a deadline, and it passes
	}{
		{"control: nothing gone, another tenant backlogged", 200, func(*stack, string) {}},
		{"the first tenant's task deleted", 0, deleteTask},
		{"the first tenant's task deleted, another tenant backlogged", 200, deleteTask},
		{"the first tenant's task past its deadline, another tenant backlogged", 200, nil},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			s := newStack(t, generous)
			s.setKey("y", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 1})
			w := newKeyWatch()
			w.startOn(t, s.rdb, s.gate, []string{"default"}, 4, true)
			time.Sleep(1100 * time.Millisecond)
			w.put(t, s.client, "default", "z", "blocker", "block", []string{"y"})
			eventually(t, 5*time.Second, "the blocker runs", func() bool { return w.ran("blocker") == 1 })
			// a, then b, wait on y; a turn (the idle tick's, at the
			// latest) registers both with it, a first: equal start tags,
			// and a sorts first.
			var opts []asynq.Option
			deadline := time.Now().Add(1500 * time.Millisecond)
			if tc.gone == nil {
				opts = append(opts, asynq.Deadline(deadline))
			}
			if d := w.put(t, s.client, "default", "a", "a-y", "1ms", []string{"y"}, opts...); d.Outcome != admission.Parked {
				t.Fatalf("a-y: %v, want parked on key y", d.Outcome)
			}
			if d := w.put(t, s.client, "default", "b", "b-y", "1ms", []string{"y"}); d.Outcome != admission.Parked {
				t.Fatalf("b-y: %v, want parked on key y", d.Outcome)
			}
			// fair.lua's layout: kb:<key> lists the tenants registered with it.
			eventually(t, 5*time.Second, "a and b register with key y", func() bool {
				n, err := s.rdb.ZCard(context.Background(), "admitq:fair:{default}:kb:y").Result()
				return err == nil && n == 2
			})
			if tc.gone != nil {
				tc.gone(s, "a-y")
			} else {
				time.Sleep(time.Until(deadline)) // a-y's deadline passes
			}
			var cs []string
			for i := range tc.backlog {
				id := fmt.Sprintf("c-%d", i)
				w.put(t, s.client, "default", "c", id, "10ms", nil)
				cs = append(cs, id)
			}
			w.unblock("blocker")
			w.waitRuns(t, []string{"b-y"}, 10*time.Second)
			if n := w.ran("a-y"); n != 0 && !strings.HasPrefix(tc.desc, "control:") {
				t.Errorf("a-y, gone, ran %d times", n)
			}
			if len(cs) == 0 {
				return
			}
			w.waitRuns(t, cs, 30*time.Second)
			w.mu.Lock()
			defer w.mu.Unlock()
			var after int
			for _, id := range cs {
				if w.first[id].After(w.first["b-y"]) {
					after++
				}
			}
			// b and c share the workers from the unblock on: b's one task
			// goes in about a round after, not behind c's backlog.
			if after < len(cs)/2 {
				t.Errorf("b-y started after %d of c's %d tasks: it waited behind c's backlog though key y had room", len(cs)-after, len(cs))
			}
		})
	}
}

func deleteTask(s *stack, id string) {
	if err := s.ins.DeleteTask("default", id); err != nil {
		s.t.Fatal(err)
	}
}
