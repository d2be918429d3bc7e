package deps
import (
 _ "github.com/hibiken/asynq"
 _ "github.com/redis/go-redis/v9"
 _ "github.com/alicebob/miniredis/v2"
 _ "github.com/spf13/cobra"
 _ "github.com/prometheus/client_golang/prometheus"
 _ "go.uber.org/goleak"
 _ "github.com/google/go-cmp/cmp"
 _ "github.com/go-redis/redis_rate/v10"
 _ "github.com/google/uuid"
)
