package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed take.lua
	takeSrc string
	//go:embed give_back.lua
	giveBackSrc string
)

// Take returns the script (take.lua) that takes up to n tasks from an
// asynq queue as asynq's own look takes one.
func Take() *redis.Script { return redis.NewScript(takeSrc) }

// GiveBack returns the script (give_back.lua) that puts tasks Take took,
// and no handler ran, back in their queue's pending list.
func GiveBack() *redis.Script { return redis.NewScript(giveBackSrc) }
