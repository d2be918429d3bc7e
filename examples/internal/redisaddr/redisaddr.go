package redisaddr

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Default is the Redis used when neither -redis nor ADMITQ_REDIS says
// otherwise.
const Default = "127.0.0.1:6379"

// want is what an address may be, for errors.
const want = "want host:port or redis://[user:password@]host:port[/db]"

// Options reads a Redis address as the admitq command does, from
// -redis or ADMITQ_REDIS: host:port (user:password@host:port too), or a
// URL, redis://[user:password@]host:port[/db] (rediss:// for TLS). Its
// errors hold no byte of the user name or password.
func Options(s string) (*redis.Options, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty: " + want)
	}
	raw := s
	if !strings.Contains(raw, "://") {
		raw = "redis://" + raw
	}
	o, err := redis.ParseURL(raw)
	_, info, _, hasInfo := userInfo(raw)
	if err == nil && (!hasInfo || sameCredentials(o, info)) {
		return o, nil
	}
	// The parsers quote what they could not read, which for a password
	// with an unescaped '#', '/' or '?' is part of it: take the reason
	// from the URL without its user information.
	reason := "the user name or password does not parse: percent-encode each '@', ':', '/', '?', '#' and '%' in it (%40 %3A %2F %3F %23 %25)"
	switch {
	case !hasInfo:
		reason = errorReason(err)
	default:
		if _, rerr := redis.ParseURL(Redact(raw)); rerr != nil {
			reason = errorReason(rerr)
		}
	}
	return nil, fmt.Errorf("%s: %s (%s)", Redact(s), reason, want)
}

// Redact is a Redis address with its user information, everything
// between "://" (or the start) and the last '@', replaced by xxxxx. It
// works on addresses that do not parse too, so that any message may show
// the address.
func Redact(s string) string {
	head, _, tail, ok := userInfo(s)
	if !ok {
		return s
	}
	return head + "xxxxx" + tail
}

// userInfo splits raw at its user information: from "://" (or the start)
// to the last '@', since a password may hold an unescaped '@', '/', '?' or
// '#' that a URL parser reads as the end of it.
func userInfo(raw string) (head, info, tail string, ok bool) {
	if scheme, rest, found := strings.Cut(raw, "://"); found {
		head, raw = scheme+"://", rest
	}
	i := strings.LastIndex(raw, "@")
	if i < 0 {
		return head, "", raw, false
	}
	return head, raw[:i], raw[i:], true
}

// sameCredentials reports whether o's user name and password are the
// whole of info: a password with an unescaped '/', '?' or '#' parses as a
// shorter one and a path, query or fragment.
func sameCredentials(o *redis.Options, info string) bool {
	user, pass, _ := strings.Cut(info, ":")
	u, err1 := url.PathUnescape(user)
	p, err2 := url.PathUnescape(pass)
	return err1 == nil && err2 == nil && u == o.Username && p == o.Password
}

// errorReason drops the URL that url.Parse puts in its errors.
func errorReason(err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err.Error()
	}
	return strings.TrimPrefix(err.Error(), "redis: ")
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
		return fmt.Errorf("%s %w", name, err)
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
