package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed started.lua
var startedSrc string

// Started returns the script (started.lua) that marks a task's first start
// in asynq's task hash and reports whether the mark was new. Throttled
// retries and shutdown requeues do not raise asynq's retry count; the mark
// tells their reruns from a first start.
func Started() *redis.Script { return redis.NewScript(startedSrc) }
