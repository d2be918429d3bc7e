package worker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/enqueue"
)

func keyedTask(keys string) *asynq.Task {
	h := map[string]string{enqueue.TenantHeader: "acme"}
	if keys != "" {
		h[enqueue.KeysHeader] = keys
	}
	return asynq.NewTaskWithHeaders("t", nil, h)
}

func TestTaskKeys(t *testing.T) {
	tests := []struct {
		desc   string
		header string
		want   []string
	}{
		{"no header, no keys", "", nil},
		{"one key", "api:stripe", []string{"api:stripe"}},
		{"keys are separated by newlines", "api:stripe\ndb", []string{"api:stripe", "db"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			task := keyedTask(tc.header)
			if diff := cmp.Diff(tc.want, taskKeys(task)); diff != "" {
				t.Errorf("taskKeys mismatch (-want,+got):\n%s", diff)
			}
			ctx, _ := withTenant(context.Background(), task)
			if diff := cmp.Diff(tc.want, Keys(ctx)); diff != "" {
				t.Errorf("Keys(ctx) mismatch (-want,+got):\n%s", diff)
			}
		})
	}
	t.Run("Keys returns the caller's own slice", func(t *testing.T) {
		ctx, _ := withTenant(context.Background(), keyedTask("a\nb"))
		Keys(ctx)[0] = "changed"
		if got := Keys(ctx)[0]; got != "a" {
			t.Errorf("after changing one result, Keys(ctx)[0] = %q, want a", got)
		}
	})
}

func TestCarries(t *testing.T) {
	task := keyedTask("api:stripe\ndb")
	for key, want := range map[string]bool{"api:stripe": true, "db": true, "api": false, "": false, "api:stripe\ndb": false} {
		if got := carries(task, key); got != want {
			t.Errorf("carries(%q) = %v, want %v", key, got, want)
		}
	}
	if carries(keyedTask(""), "") {
		t.Error(`a task without keys carries ""`)
	}
}

// A ThrottledKey for a key the task does not carry is logged once per key;
// one for a key it carries, or a Throttled, is not.
func TestKeyWarningsOncePerKey(t *testing.T) {
	var buf bytes.Buffer
	w := newKeyWarnings(slog.New(slog.NewTextHandler(&buf, nil)))
	ctx := context.Background()
	task := keyedTask("api:stripe")
	w.check(ctx, task, ThrottledKey("api:stripe", time.Second))
	w.check(ctx, task, Throttled(time.Second))
	w.check(ctx, task, nil)
	w.check(ctx, task, fmt.Errorf("x: %w", ThrottledKey("api:strip", time.Second)))
	w.check(ctx, task, ThrottledKey("api:strip", time.Second))
	w.check(ctx, keyedTask(""), ThrottledKey("api:strip", time.Second))
	w.check(ctx, task, ThrottledKey("", time.Second))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "key=api:strip ") || !strings.Contains(lines[1], `key=""`) {
		t.Errorf("logged:\n%s\nwant one line for api:strip and one for \"\"", buf.String())
	}
}

// However many distinct keys a handler throttles without carrying them,
// the Worker remembers at most maxWarnedKeys, and says when it stops.
func TestKeyWarningsAreBounded(t *testing.T) {
	var buf bytes.Buffer
	w := newKeyWarnings(slog.New(slog.NewTextHandler(&buf, nil)))
	task := keyedTask("")
	for i := range maxWarnedKeys + 50 {
		w.check(context.Background(), task, ThrottledKey(fmt.Sprintf("k%d", i), time.Second))
	}
	if n := strings.Count(buf.String(), "\n"); n != maxWarnedKeys+1 {
		t.Errorf("%d lines logged, want %d and one saying the rest go unlogged", n, maxWarnedKeys+1)
	}
	if len(w.seen) != maxWarnedKeys {
		t.Errorf("%d keys remembered, want %d", len(w.seen), maxWarnedKeys)
	}
}
