package worker

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/enqueue"
)

type keysKey struct{}

// Keys returns the concurrency keys of the task being handled (enqueue.Keys),
// sorted: the value of the enqueue.KeysHeader header, set by
// enqueue.Client. It returns nil for a task without keys, and for a ctx
// that does not come from a Worker. The slice is the caller's.
func Keys(ctx context.Context) []string {
	keys, _ := ctx.Value(keysKey{}).([]string)
	return slices.Clone(keys)
}

// taskKeys reads t's keys from its enqueue.KeysHeader header: nil when it
// has none.
func taskKeys(t *asynq.Task) []string {
	h := t.Headers()[enqueue.KeysHeader]
	if h == "" {
		return nil
	}
	return strings.Split(h, "\n") // enqueue.KeysHeader's separator
}

// withKeys puts t's keys into ctx, for Keys.
func withKeys(ctx context.Context, t *asynq.Task) context.Context {
	if keys := taskKeys(t); keys != nil {
		return context.WithValue(ctx, keysKey{}, keys)
	}
	return ctx
}

// carries reports whether t carries key.
func carries(t *asynq.Task, key string) bool {
	return key != "" && slices.Contains(taskKeys(t), key)
}

// maxWarnedKeys bounds how many distinct keys keyWarnings remembers, so
// that a handler that throttles ever new keys no task carries (built from
// request data, say) cannot grow the Worker's memory: past it, one more
// line says that further keys go unlogged.
const maxWarnedKeys = 1000

// keyWarnings logs, once per key, that a handler throttled a key
// (ThrottledKey) that its task does not carry.
type keyWarnings struct {
	log  *slog.Logger
	mu   sync.Mutex
	seen map[string]bool
	full bool
}

func newKeyWarnings(log *slog.Logger) *keyWarnings {
	return &keyWarnings{log: log, seen: map[string]bool{}}
}

// check warns when err throttles a key that t does not carry, unless that
// key was warned of before.
func (w *keyWarnings) check(ctx context.Context, t *asynq.Task, err error) {
	te, ok := asThrottled(err)
	if !ok || !te.onKey() || carries(t, te.Key) {
		return
	}
	w.mu.Lock()
	warn, last := !w.seen[te.Key] && !w.full, false
	if warn {
		w.seen[te.Key] = true
		last = len(w.seen) == maxWarnedKeys
		w.full = last
	}
	w.mu.Unlock()
	if !warn {
		return
	}
	id, _ := asynq.GetTaskID(ctx)
	w.log.WarnContext(ctx, "worker: a handler throttled a key its task does not carry: the task is retried, nothing else is held (logged once per key)",
		"key", te.Key, "task_keys", taskKeys(t), "tenant", Tenant(ctx), "task_type", t.Type(), "task_id", id)
	if last {
		w.log.WarnContext(ctx, "worker: further keys throttled but not carried by their tasks are not logged", "keys_logged", maxWarnedKeys)
	}
}
