package worker

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
)

// heardFinish is one Finished call a recordingFinisher heard.
type heardFinish struct {
	tenant string
	done   bool
	keys   []string
}

// recordingFinisher records the Finished calls finishing makes.
type recordingFinisher struct{ heard []heardFinish }

func (r *recordingFinisher) Finished(_, tenant, _ string, _ time.Duration, done bool, keys ...string) {
	r.heard = append(r.heard, heardFinish{tenant: tenant, done: done, keys: keys})
}
func (*recordingFinisher) Started(_, _ string)                                {}
func (*recordingFinisher) Throttled(_, _, _ string, _, _ time.Duration)       {}
func (*recordingFinisher) ThrottledKey(_, _, _, _ string, _, _ time.Duration) {}

// The dispatcher hears each finished task's concurrency keys (its
// enqueue.KeysHeader), so that a finish that frees a key's places goes
// in at once; a task without keys hands in none. (The dispatcher's
// TestFrontsAndCappedOrKeyedFinishesDoNotGather holds the rest: a keyed
// task that asynq will retry frees no place.)
func TestFinishingHandsInTheTasksKeys(t *testing.T) {
	for _, c := range []struct {
		name string
		keys string
		err  error
		want heardFinish
	}{
		{name: "no keys", want: heardFinish{tenant: "acme", done: true}},
		{name: "two keys", keys: "api:a\napi:b", want: heardFinish{tenant: "acme", done: true, keys: []string{"api:a", "api:b"}}},
		{name: "archived", keys: "api:a", err: asynq.SkipRetry, want: heardFinish{tenant: "acme", done: true, keys: []string{"api:a"}}},
	} {
		r := &recordingFinisher{}
		h := finishing{next: asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return c.err }), disp: r}
		_ = h.ProcessTask(context.Background(), keyedTask(c.keys))
		if diff := cmp.Diff([]heardFinish{c.want}, r.heard, cmp.AllowUnexported(heardFinish{})); diff != "" {
			t.Errorf("%s: Finished calls (-want +got):\n%s", c.name, diff)
		}
	}
}
