package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
)

// defaultRedisURL is the server used when neither --redis, --redis-cluster
// nor ADMITQ_REDIS says otherwise (demo embeds its own instead).
const defaultRedisURL = "redis://127.0.0.1:6379"

// redisConfig is where the global flags point: one server or a cluster.
// Exactly one of single and cluster is set.
type redisConfig struct {
	single  *redis.Options
	cluster *redis.ClusterOptions
	// display names the server(s) for messages: a URL without user or
	// password.
	display string
	// source is the flag or variable that named a single server:
	// --redis or ADMITQ_REDIS.
	source string
}

// client returns a new client; the caller closes it.
func (c redisConfig) client() redis.UniversalClient {
	if c.cluster != nil {
		o := *c.cluster
		return redis.NewClusterClient(&o)
	}
	o := *c.single
	return redis.NewClient(&o)
}

// probe returns a client for a first PING that fails fast: no retries, one
// dial. The client for the real work keeps go-redis's retries.
func (c redisConfig) probe() redis.UniversalClient {
	if c.cluster != nil {
		o := *c.cluster
		o.MaxRetries, o.DialerRetries = -1, 1
		return redis.NewClusterClient(&o)
	}
	o := *c.single
	o.MaxRetries, o.DialerRetries = -1, 1
	return redis.NewClient(&o)
}

// connOpt makes c an asynq.RedisConnOpt, so that a worker's asynq server
// gets the same TLS, credentials and timeouts, and owns (closes) its client.
type connOpt struct{ cfg redisConfig }

func (o connOpt) MakeRedisClient() any { return o.cfg.client() }

// parseRedis turns the global flags into a redisConfig. rawURL is --redis
// or ADMITQ_REDIS, which urlSource names in errors: a URL, or host:port as
// the examples take it. rawCluster is --redis-cluster. The errors never hold
// a password.
func parseRedis(rawURL, urlSource, rawCluster, caFile string, timeout time.Duration) (redisConfig, error) {
	var cfg redisConfig
	var tlsOn bool
	switch {
	case rawCluster != "":
		co, err := parseCluster(rawCluster)
		if err != nil {
			return redisConfig{}, err
		}
		cfg.cluster = co
		tlsOn = co.TLSConfig != nil
		scheme := "redis"
		if tlsOn {
			scheme = "rediss"
		}
		cfg.display = scheme + "://" + strings.Join(co.Addrs, ",")
		co.DialTimeout, co.ReadTimeout, co.WriteTimeout = orDefault(co.DialTimeout, timeout), orDefault(co.ReadTimeout, timeout), orDefault(co.WriteTimeout, timeout)
	default:
		o, err := parseRedisURL(redisURLOf(rawURL))
		if err != nil {
			return redisConfig{}, fmt.Errorf("%s %s: %s (want redis://[user:password@]host:port[/db], rediss://… or host:port)", urlSource, redactURL(rawURL), err)
		}
		cfg.single = o
		cfg.source = urlSource
		tlsOn = o.TLSConfig != nil
		cfg.display = displayURL(o)
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = orDefault(o.DialTimeout, timeout), orDefault(o.ReadTimeout, timeout), orDefault(o.WriteTimeout, timeout)
	}
	if caFile == "" {
		return cfg, nil
	}
	if !tlsOn {
		return redisConfig{}, errors.New("--tls-ca needs a rediss:// URL")
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return redisConfig{}, fmt.Errorf("--tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return redisConfig{}, fmt.Errorf("--tls-ca %s: no PEM certificate in the file", caFile)
	}
	if cfg.single != nil {
		cfg.single.TLSConfig.RootCAs = pool
	} else {
		cfg.cluster.TLSConfig.RootCAs = pool
	}
	return cfg, nil
}

// redisURLOf makes host:port (or user:password@host:port) a redis:// URL,
// so that ADMITQ_REDIS means the same to the command as to the examples.
func redisURLOf(raw string) string {
	if strings.Contains(raw, "://") {
		return raw
	}
	return "redis://" + raw
}

// parseCluster reads "host:port,host:port", optionally led by a scheme and
// credentials that apply to every node: "rediss://user:pass@h1:7000,h2:7001".
func parseCluster(raw string) (*redis.ClusterOptions, error) {
	co := &redis.ClusterOptions{}
	rest := raw
	if scheme, after, ok := strings.Cut(raw, "://"); ok {
		switch scheme {
		case "redis":
		case "rediss":
			co.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		default:
			return nil, fmt.Errorf("--redis-cluster %s: scheme %q, want redis or rediss", redactURL(raw), scheme)
		}
		rest = after
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			user, pass, _ := strings.Cut(rest[:i], ":")
			var err error
			if co.Username, err = url.PathUnescape(user); err != nil {
				return nil, fmt.Errorf("--redis-cluster %s: bad user name escape", redactURL(raw))
			}
			if co.Password, err = url.PathUnescape(pass); err != nil {
				return nil, fmt.Errorf("--redis-cluster %s: bad password escape", redactURL(raw))
			}
			rest = rest[i+1:]
		}
	}
	if strings.ContainsAny(rest, "/?#") {
		return nil, fmt.Errorf("--redis-cluster %s: want host:port,... (a cluster has no database number or options)", redactURL(raw))
	}
	for _, a := range strings.Split(rest, ",") {
		a = strings.TrimSpace(a)
		host, port, err := splitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("--redis-cluster: node %q: %v", a, err)
		}
		co.Addrs = append(co.Addrs, host+":"+port)
	}
	return co, nil
}

func splitHostPort(a string) (host, port string, err error) {
	i := strings.LastIndex(a, ":")
	if i <= 0 || i == len(a)-1 {
		return "", "", errors.New("want host:port")
	}
	host, port = a[:i], a[i+1:]
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return host, port, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d != 0 {
		return d
	}
	return def
}

// displayURL names a single server without credentials.
func displayURL(o *redis.Options) string {
	scheme := "redis"
	if o.TLSConfig != nil {
		scheme = "rediss"
	}
	if o.Network == "unix" {
		return "unix://" + o.Addr
	}
	s := scheme + "://" + o.Addr
	if o.DB != 0 {
		s += "/" + strconv.Itoa(o.DB)
	}
	return s
}

// userInfo splits raw at the user information: what lies between "://"
// (or the start, for host:port) and the last '@'. The last, since a
// password may hold an unescaped '@', '/', '?' or '#' that a URL parser
// would read as the end of it. ok is false when there is no '@'.
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

// redactURL is raw with its user information, as userInfo finds it,
// replaced by xxxxx, and each value of its query too (a password pasted
// as ?password=… or ?addr=…): a URL that may not even parse.
func redactURL(raw string) string {
	if head, _, tail, ok := userInfo(raw); ok {
		raw = head + "xxxxx" + tail
	}
	base, query, ok := strings.Cut(raw, "?")
	if !ok {
		return raw
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

// parseRedisURL is redis.ParseURL with errors that hold no byte of the user
// information. The parsers quote what they could not read ("invalid port
// \":AlicePw\" after host"), which for a password with an unescaped '#'
// is part of it; so the reason comes from the URL with its user
// information redacted, and a URL whose trouble is only there says so.
func parseRedisURL(raw string) (*redis.Options, error) {
	o, err := redis.ParseURL(raw)
	_, info, _, hasInfo := userInfo(raw)
	if err == nil && (!hasInfo || parsedUserInfo(o, info)) {
		return o, nil
	}
	if !hasInfo {
		return nil, errors.New(urlErrorReason(err))
	}
	if _, rerr := redis.ParseURL(redactURL(raw)); rerr != nil {
		return nil, errors.New(urlErrorReason(rerr))
	}
	return nil, errors.New("the user name or password does not parse: percent-encode each '@', ':', '/', '?', '#' and '%' in it (%40 %3A %2F %3F %23 %25)")
}

// parsedUserInfo reports whether o's credentials are the whole of info,
// as userInfo found it: when a password holds an unescaped '/', '?' or
// '#', a URL parser reads a shorter one, and the rest as a path, a query or
// a fragment.
func parsedUserInfo(o *redis.Options, info string) bool {
	user, pass, _ := strings.Cut(info, ":")
	u, err1 := url.PathUnescape(user)
	p, err2 := url.PathUnescape(pass)
	return err1 == nil && err2 == nil && u == o.Username && p == o.Password
}

// urlErrorReason drops the URL that url.Parse puts in its errors, because
// it holds the password.
func urlErrorReason(err error) string {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err.Error()
	}
	return strings.TrimPrefix(err.Error(), "redis: ")
}

// urlSecrets returns what must not show in any message about a URL,
// whether or not it parses: its whole user information as userInfo finds
// it, the password in it, escaped and not, and the password a URL parser
// reads, which differs when the password holds an unescaped '/', '?' or
// '#'.
func urlSecrets(raw string) []string {
	_, info, _, ok := userInfo(raw)
	if !ok {
		return nil
	}
	var out []string
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if _, pass, found := strings.Cut(info, ":"); found {
		add(info)
		add(pass)
		if u, err := url.PathUnescape(pass); err == nil {
			add(u)
		}
	}
	if u, err := url.Parse(redisURLOf(raw)); err == nil && u.User != nil {
		if p, set := u.User.Password(); set {
			add(p)
		}
	}
	// Longest first, so that scrubbing the password does not leave a
	// shorter secret's remains.
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// ping checks that Redis answers within timeout, and names the server if not.
func ping(ctx context.Context, cfg redisConfig, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rdb := cfg.probe()
	defer rdb.Close()
	err := rdb.Ping(pctx).Err()
	if cfg.cluster != nil && err != nil && strings.Contains(err.Error(), "cluster support disabled") {
		return &serverError{fmt.Sprintf("Redis at %s is not a Redis Cluster (it has cluster support disabled): name it with --redis (or ADMITQ_REDIS) instead of --redis-cluster (or %s)",
			redactURL(cfg.display), clusterEnv)}
	}
	if err == nil {
		err = checkServer(pctx, rdb, cfg)
		var se *serverError
		if err == nil || errors.As(err, &se) {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %v", timeout)
	}
	return fmt.Errorf("cannot reach Redis at %s: %w", cfg.display, err)
}

// serverError is a server that answers but that admitq cannot use: a node
// of a cluster given as one server, or a Redis older than 7. Its message
// is the whole story, for one line.
type serverError struct{ msg string }

func (e *serverError) Error() string { return e.msg }

// checkServer refuses what admitq cannot work with (admission.CheckServer):
// a single server that is a node of a Redis Cluster, which would answer
// MOVED to most keys, and a Redis older than 7, on any master of a
// cluster. Other errors, a server that does not answer, pass through.
// A server that does not answer INFO passes: a MOVED reply later still
// names the mistake (movedReply).
func checkServer(ctx context.Context, rdb redis.UniversalClient, cfg redisConfig) error {
	err := admission.CheckServer(ctx, rdb)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, admission.ErrClusterNode):
		return &serverError{clusterNodeMessage(cfg.display, cfg.source)}
	case errors.Is(err, admission.ErrRedisVersion):
		return &serverError{strings.TrimPrefix(err.Error(), "admitq: ")}
	}
	return err
}

// clusterNodeMessage says that name, given by source, is one node of a
// Redis Cluster, and how to name the cluster instead.
func clusterNodeMessage(name, source string) string {
	if name == "" {
		name = defaultRedisURL
	}
	return fmt.Sprintf("Redis at %s is a node of a Redis Cluster: name the cluster with --redis-cluster host:port,... (or %s) instead of %s",
		redactURL(name), clusterEnv, source)
}

// movedReply reports whether err is, or wraps, a MOVED redirection: the
// answer of a cluster node to a key in another node's slots.
func movedReply(err error) bool {
	return err != nil && movedPattern.MatchString(err.Error())
}

// movedPattern is a MOVED reply, "MOVED 3999 127.0.0.1:6381", at the start
// of an error or after a colon that wraps it.
var movedPattern = regexp.MustCompile(`(^|: )MOVED [0-9]+ \S+:[0-9]+`)
