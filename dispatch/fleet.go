package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protowire"
)

// asynq's registry of live servers: a ZSET of keys scored with their
// expiry in Unix seconds, each key a STRING holding the server's
// ServerInfo protobuf (asynq's internal/base and internal/proto).
const (
	asynqServers      = "asynq:servers"
	serverInfoQueues  = 5 // ServerInfo.queues, map<string, int32>
	mapEntryKeyField  = 1
	maxServersChecked = 1000
)

// servers counts the live asynq servers that process queue, by asynq's
// own registry: gate workers and plain asynq servers alike. Beside the
// dispatcher's count of gate workers it tells when a server without a
// gate serves a dispatched queue, taking tasks the dispatcher counts no
// room for.
func (d *Dispatcher) servers(ctx context.Context, queue string, now int64) (int, error) {
	keys, err := d.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: asynqServers, ByScore: true,
		Start: strconv.FormatInt(now, 10), Stop: "+inf", Count: maxServersChecked}).Result()
	if err != nil {
		return 0, fmt.Errorf("dispatch: reading asynq's servers: %w", d.recoverFrom(err))
	}
	if len(keys) == 0 {
		return 0, nil
	}
	infos := make([]*redis.StringCmd, len(keys))
	_, err = d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			infos[i] = p.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("dispatch: reading asynq's servers: %w", d.recoverFrom(err))
	}
	n := 0
	for _, info := range infos {
		if b, err := info.Bytes(); err == nil && servesQueue(b, queue) {
			n++
		}
	}
	return n, nil
}

// servesQueue reports whether a ServerInfo protobuf lists queue among the
// server's queues.
func servesQueue(info []byte, queue string) bool {
	for len(info) > 0 {
		num, typ, n := protowire.ConsumeTag(info)
		if n < 0 {
			return false
		}
		info = info[n:]
		if num != serverInfoQueues || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, info); n < 0 {
				return false
			}
			info = info[n:]
			continue
		}
		entry, n := protowire.ConsumeBytes(info)
		if n < 0 {
			return false
		}
		info = info[n:]
		if entryKey(entry) == queue {
			return true
		}
	}
	return false
}

// entryKey reads the string key (field 1) of a protobuf map entry.
func entryKey(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == mapEntryKeyField && typ == protowire.BytesType {
			v, n := protowire.ConsumeString(b)
			if n < 0 {
				return ""
			}
			return v
		}
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return ""
		}
		b = b[n:]
	}
	return ""
}
