package redisaddr

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Default is the Redis used when neither -redis nor ADMITQ_REDIS says
// otherwise.
const Default = "127.0.0.1:6379"

// Options reads a Redis address as the admitq command does, from
// -redis or ADMITQ_REDIS: host:port, or a URL,
// redis://[user:password@]host:port[/db] (rediss:// for TLS).
func Options(s string) (*redis.Options, error) {
	if strings.Contains(s, "://") {
		o, err := redis.ParseURL(s)
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its URL may hold a password
		}
		if err != nil {
			return nil, fmt.Errorf("%w (want host:port or redis://[user:password@]host:port[/db])", err)
		}
		return o, nil
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return nil, fmt.Errorf("%q: want host:port or redis://[user:password@]host:port[/db]", s)
	}
	return &redis.Options{Addr: s}, nil
}

// CheckFlag checks the value of -redis, naming where it came from:
// the flag, or the environment.
func CheckFlag(fs *flag.FlagSet, value string) error {
	if _, err := Options(value); err != nil {
		name := "ADMITQ_REDIS"
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "redis" {
				name = "-redis"
			}
		})
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Ping checks that Redis answers, so that a wrong address ends the
// program at once with one line, rather than in a retry loop. It dials once,
// without go-redis's retries, so that the error names the cause (say,
// connection refused).
func Ping(ctx context.Context, o *redis.Options) error {
	p := *o
	p.MaxRetries, p.DialerRetries = -1, 1
	rdb := redis.NewClient(&p)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("cannot reach Redis at %s: %w", o.Addr, err)
	}
	return nil
}

// QuietLog drops go-redis's own log lines (set with redis.SetLogger in
// main): they repeat, on stderr, the errors that the program reports itself.
type QuietLog struct{}

func (QuietLog) Printf(context.Context, string, ...any) {}
