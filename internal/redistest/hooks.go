package redistest

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The hooks below inject faults into a go-redis client at exact points,
// for tests that must not depend on timing. Add one with client.AddHook.

// CancelHook cancels a context, once armed, just before the client's next
// command or pipeline, so that the command fails exactly as a caller's
// cancellation makes it fail.
type CancelHook struct {
	cancel atomic.Pointer[context.CancelFunc]
}

// Arm makes the next command call cancel first.
func (h *CancelHook) Arm(cancel context.CancelFunc) { h.cancel.Store(&cancel) }

func (h *CancelHook) fire() {
	if c := h.cancel.Swap(nil); c != nil {
		(*c)()
	}
}

// DialHook implements redis.Hook.
func (h *CancelHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *CancelHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.fire()
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *CancelHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.fire()
		return next(ctx, cmds)
	}
}

// ScriptDoneHook cancels a context, once armed, as soon as a script call
// (EVAL or EVALSHA, such as asynq's write of a task) has succeeded, alone or
// in a pipeline, and then counts every command that follows.
type ScriptDoneHook struct {
	cancel atomic.Pointer[context.CancelFunc]
	fired  atomic.Bool
	after  atomic.Int64
}

// Arm makes the next successful script call call cancel.
func (h *ScriptDoneHook) Arm(cancel context.CancelFunc) { h.cancel.Store(&cancel) }

// Fired reports whether the hook has cancelled.
func (h *ScriptDoneHook) Fired() bool { return h.fired.Load() }

// After returns how many commands began after the hook cancelled.
func (h *ScriptDoneHook) After() int64 { return h.after.Load() }

// DialHook implements redis.Hook.
func (h *ScriptDoneHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *ScriptDoneHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fired.Load() {
			h.after.Add(1)
		}
		err := next(ctx, cmd)
		if err == nil && isScript(cmd) {
			h.fire()
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h *ScriptDoneHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.fired.Load() {
			h.after.Add(int64(len(cmds)))
		}
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if cmd.Err() == nil && isScript(cmd) {
				h.fire()
				break
			}
		}
		return err
	}
}

// isScript reports whether cmd is a script call, EVAL or EVALSHA.
func isScript(cmd redis.Cmder) bool {
	name := cmd.Name()
	return name == "evalsha" || name == "eval"
}

func (h *ScriptDoneHook) fire() {
	if c := h.cancel.Swap(nil); c != nil {
		h.fired.Store(true)
		(*c)()
	}
}

// FailHook fails every command named Name (lower case, as go-redis names
// them), as a connection reset would, without sending it.
type FailHook struct{ Name string }

// DialHook implements redis.Hook.
func (h FailHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h FailHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == h.Name {
			cmd.SetErr(io.EOF)
			return io.EOF
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h FailHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
