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

	"github.com/admitq/admitq/admission"
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
// between "://" (or the start) and the last '@', replaced by xxxxx, and
// each value of its query too (a password pasted as ?password=… or
// ?addr=…). It works on addresses that do not parse too, so that any
// message may show the address.
func Redact(s string) string {
	if head, _, tail, ok := userInfo(s); ok {
		s = head + "xxxxx" + tail
	}
	base, query, ok := strings.Cut(s, "?")
	if !ok {
		return s
	}
	parts := strings.Split(query, "&")
	for i, p := range parts {
		if k, _, hasValue := strings.Cut(p, "="); hasValue {
			parts[i] = k + "=xxxxx"
		} else if p != "" {
			parts[i] = "xxxxx"
		}
	}
	return base + "?" + strings.Join(parts, "&")
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

// Var defines -redis on fs, storing into p. Its default is applied by
// Resolve after fs is parsed, not by the flag package, so that a usage
// message never shows ADMITQ_REDIS, which may hold a password.
func Var(fs *flag.FlagSet, p *string) {
	fs.StringVar(p, "redis", "", "Redis: host:port or redis://[user:password@]host:port[/db] (env ADMITQ_REDIS; default "+Default+")")
}

// Resolve returns the Redis address once fs (with Var's -redis, whose
// value is value) is parsed: -redis, else ADMITQ_REDIS, else Default,
// checked as Options checks it. Its errors name where the address came
// from and hold no byte of a password. An empty -redis is an error, not a
// wish for the default.
func Resolve(fs *flag.FlagSet, value string, getenv func(string) string) (string, error) {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "redis" })
	switch {
	case given && strings.TrimSpace(value) == "":
		return "", errors.New("-redis is empty; give host:port, or leave the flag out for ADMITQ_REDIS or " + Default)
	case given:
	case getenv("ADMITQ_REDIS") != "":
		value = getenv("ADMITQ_REDIS")
	default:
		value = Default
	}
	if err := CheckFlag(fs, value); err != nil {
		return "", err
	}
	return value, nil
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

// Ping checks that Redis answers, and that the examples can work with it
// (admission.CheckServer: Redis 7 or newer, and one server, not a node of
// a Redis Cluster), so that a wrong address ends the program at once with
// one line, rather than in a retry loop. It dials once, without
// go-redis's retries, so that the error names the cause (say, connection
// refused).
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
	err := admission.CheckServer(ctx, rdb)
	switch {
	case errors.Is(err, admission.ErrClusterNode):
		return fmt.Errorf("the Redis at %s is a node of a Redis Cluster, and the examples take one server; "+
			"give a Redis that is not in a cluster (the admitq command takes a cluster with --redis-cluster)", o.Addr)
	case errors.Is(err, admission.ErrRedisVersion):
		return errors.New(strings.TrimPrefix(err.Error(), "admitq: "))
	case err != nil:
		return fmt.Errorf("cannot reach Redis at %s: %w", o.Addr, err)
	}
	return nil
}

// QuietLog drops go-redis's own log lines (set with redis.SetLogger in
// main): they repeat, on stderr, the errors that the program reports itself.
type QuietLog struct{}

func (QuietLog) Printf(context.Context, string, ...any) {}
