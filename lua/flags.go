package lua

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// FlagFallback returns a go-redis hook for a client whose server may not
// know script flags (a shebang line such as "#!lua", Redis 7.0), as
// miniredis does not. Scripts that write start with one, so that Redis
// refuses them whole while it is out of memory, instead of letting a
// script that deleted something first write past maxmemory.
//
// When the server fails to compile a script because of its shebang, the
// hook sends the script again without that line (keeping the newline, so
// line numbers hold), and from then on sends every such script, and the
// EVALSHA of its hash, without it. On a server that knows flags it only
// looks at errors. admission.New adds it to the clients it is given; add
// it yourself to a client that runs these scripts directly.
func FlagFallback() redis.Hook { return &flagFallback{} }

type flagFallback struct {
	strip atomic.Bool // the server does not know script flags
	shas  sync.Map    // hash of a script with a shebang → hash without it
}

// DialHook implements redis.Hook.
func (h *flagFallback) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h *flagFallback) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.strip.Load() {
			h.unflag(cmd)
		}
		err := next(ctx, cmd)
		if err != nil && flagsUnknown(cmd, err) {
			h.strip.Store(true)
			h.unflag(cmd)
			cmd.SetErr(nil)
			err = next(ctx, cmd)
		}
		return err
	}
}

// ProcessPipelineHook implements redis.Hook. The commands of a
// transaction are not sent again.
func (h *flagFallback) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.strip.Load() {
			for _, cmd := range cmds {
				h.unflag(cmd)
			}
		}
		err := next(ctx, cmds)
		if err == nil {
			return nil
		}
		var again []redis.Cmder
		for _, cmd := range cmds {
			switch name := cmd.Name(); {
			case name == "multi" || name == "exec":
				return err
			case cmd.Err() != nil && flagsUnknown(cmd, cmd.Err()):
				again = append(again, cmd)
			}
		}
		if len(again) == 0 {
			return err
		}
		h.strip.Store(true)
		for _, cmd := range again {
			h.unflag(cmd)
			cmd.SetErr(nil)
		}
		_ = next(ctx, again)
		for _, cmd := range cmds {
			if err := cmd.Err(); err != nil {
				return err
			}
		}
		return nil
	}
}

// flagsUnknown reports whether err is a server's failure to compile cmd's
// script at its shebang line.
func flagsUnknown(cmd redis.Cmder, err error) bool {
	src, ok := scriptArg(cmd)
	msg := err.Error()
	return ok && strings.HasPrefix(src, "#!") &&
		strings.Contains(msg, "Error compiling script") && strings.Contains(msg, "near '#'")
}

// scriptArg returns the script of an EVAL or SCRIPT LOAD.
func scriptArg(cmd redis.Cmder) (string, bool) {
	args := cmd.Args()
	switch cmd.Name() {
	case "eval", "eval_ro":
		if len(args) > 1 {
			s, ok := args[1].(string)
			return s, ok
		}
	case "script":
		if len(args) > 2 && strings.EqualFold(argString(args[1]), "load") {
			s, ok := args[2].(string)
			return s, ok
		}
	}
	return "", false
}

func argString(a any) string {
	s, _ := a.(string)
	return s
}

// unflag drops the shebang line of cmd's script, or maps the hash of an
// EVALSHA to that of the script without it.
func (h *flagFallback) unflag(cmd redis.Cmder) {
	args := cmd.Args()
	switch cmd.Name() {
	case "evalsha", "evalsha_ro":
		if len(args) > 1 {
			if to, ok := h.shas.Load(argString(args[1])); ok {
				args[1] = to
			}
		}
		return
	}
	src, ok := scriptArg(cmd)
	if !ok || !strings.HasPrefix(src, "#!") {
		return
	}
	body := src[strings.IndexByte(src+"\n", '\n'):] // keeps the newline
	if body == "" {
		body = " "
	}
	h.shas.Store(hash(src), hash(body))
	if cmd.Name() == "script" {
		args[2] = body
	} else {
		args[1] = body
	}
}

func hash(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
