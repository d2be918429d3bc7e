package admission

import (
	"log/slog"
	"time"
)

// An Option configures a Gate or a RedisQuotas. Options that do not apply to
// the value being built are ignored.
type Option interface {
	apply(*options)
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

type options struct {
	prefix      string
	granularity time.Duration
	timeout     time.Duration
	refresh     time.Duration
	logger      *slog.Logger
	batching    bool
	denyCache   bool
	policy      FailurePolicy
	instances   int
	// quotaCacheSize bounds RedisQuotas's cache; 0 means
	// DefaultQuotaCacheSize (see WithQuotaCacheSize).
	quotaCacheSize int
	bulkTimeout    time.Duration
	// staleFor is how much older than refresh RedisQuotas answers a cached
	// quota while it rereads it: defaultStaleFor (a test may set it).
	staleFor time.Duration
}

// defaultStaleFor is options.staleFor unless a test sets it.
const defaultStaleFor = time.Second

// DefaultTimeout is the deadline of one Redis call when WithTimeout is not
// given. A local Redis answers a script call in well under a millisecond and
// a loaded one in a few; 250ms rides out a GC pause or a failover blip, yet
// bounds what a caller waits for a Redis that is gone.
const DefaultTimeout = 250 * time.Millisecond

// DefaultBulkTimeout bounds a bulk read, such as RedisQuotas.List or
// Gate.UsageBatch, as a whole, when WithBulkTimeout is not given. Each of
// its round trips has the per-call timeout, or a second if that is more.
const DefaultBulkTimeout = time.Minute

// WithBulkTimeout sets the deadline of a whole bulk read
// (RedisQuotas.List, Scan and GetBatch; Gate.UsageBatch, UsageTop and
// ScanTenants), which takes as many round trips as the data needs, each
// under the per-call timeout (WithTimeout) but given a second at least; 0
// or less keeps DefaultBulkTimeout. The caller's context can only shorten it.
func WithBulkTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) {
		if d > 0 {
			o.bulkTimeout = d
		}
	})
}

// DefaultRefresh is how long RedisQuotas serves a cached quota before it
// reads it again, so a change reaches every producer within about a second.
const DefaultRefresh = 500 * time.Millisecond

func newOptions(opts []Option) options {
	o := options{
		prefix:      "admitq",
		granularity: time.Microsecond,
		timeout:     DefaultTimeout,
		refresh:     DefaultRefresh,
		staleFor:    defaultStaleFor,
		logger:      slog.New(slog.DiscardHandler),
		batching:    true,
		denyCache:   true,
		instances:   1,
		bulkTimeout: DefaultBulkTimeout,
	}
	for _, opt := range opts {
		opt.apply(&o)
	}
	return o
}

// WithPrefix sets the prefix of every Redis key; the default is "admitq".
// Gates and quota stores that share tenants must share the prefix. A gate
// whose prefix holds a brace ({ or }) decides on its own, but package
// dispatch refuses it (dispatch.ErrInvalidPrefix), and so Enqueue into any
// queue and a worker with the gate: the dispatcher's keys must hash on
// their queue's {<queue>} tag, beside asynq's.
func WithPrefix(prefix string) Option {
	return optionFunc(func(o *options) {
		if prefix != "" {
			o.prefix = prefix
		}
	})
}

// WithGranularity rounds deferred slots up to a whole multiple of d, for
// schedulers that cannot run work at finer times: asynq schedules whole
// seconds, so enqueue uses one second. Rounding up keeps the bound exact; it
// only ever moves a slot later. The default, and any d below 1µs, is 1µs.
func WithGranularity(d time.Duration) Option {
	return optionFunc(func(o *options) { o.granularity = max(d, time.Microsecond) })
}

// WithTimeout sets the deadline of each Redis call; 0 or less keeps
// DefaultTimeout. The caller's context can only shorten it.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(o *options) {
		if d > 0 {
			o.timeout = d
		}
	})
}

// WithRefresh sets how long RedisQuotas serves a cached quota before reading
// it again; 0 or less keeps DefaultRefresh.
func WithRefresh(d time.Duration) Option {
	return optionFunc(func(o *options) {
		if d > 0 {
			o.refresh = d
		}
	})
}

// WithLogger gives the gate a logger for events off the hot path, such as
// the breaker opening and closing. The default discards them.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(o *options) {
		if l != nil {
			o.logger = l
		}
	})
}

// WithBatching turns group commit on (the default) or off. With it on,
// concurrent calls share Redis pipelines and script calls, which multiplies
// throughput under load and adds no latency when idle; decisions are the
// same either way.
func WithBatching(on bool) Option {
	return optionFunc(func(o *options) { o.batching = on })
}

// WithDenyCache turns the local cache of rejections on (the default) or
// off. With it on, a tenant that Redis rejected until T (or whose window an
// admission filled until T) is rejected locally (Decision.Local) until T,
// so a flood from one tenant costs Redis about one script call per
// admission. A retried ID of the caller's own that holds a slot still gets
// it back (one ZMSCORE checks); under a Counter quota, which keeps no IDs,
// it is rejected while its tenant is cached.
func WithDenyCache(on bool) Option {
	return optionFunc(func(o *options) { o.denyCache = on })
}

// FailurePolicy says what the gate does while Redis cannot be reached.
type FailurePolicy int

const (
	// FailClosed returns an error wrapping ErrUnavailable: no work is
	// admitted that Redis has not accounted for. It is the default.
	FailClosed FailurePolicy = iota
	// FailOpen decides locally instead, admitting at most
	// Limit/instances per tenant in any window (see WithInstances), and
	// marks the decisions Local. It only admits or rejects, never defers.
	// The README says how far over the limit that can take a tenant, and
	// what the gate does to keep it close.
	FailOpen
)

// String returns "fail-closed" or "fail-open".
func (p FailurePolicy) String() string {
	if p == FailOpen {
		return "fail-open"
	}
	return "fail-closed"
}

// WithFailurePolicy sets what the gate does while Redis is unavailable; the
// default is FailClosed.
func WithFailurePolicy(p FailurePolicy) Option {
	return optionFunc(func(o *options) { o.policy = p })
}

// WithInstances tells the gate how many producer processes share each
// quota, so that under FailOpen each admits Limit/n per window locally
// (at least one). The default, and any n below 1, is 1.
func WithInstances(n int) Option {
	return optionFunc(func(o *options) { o.instances = max(n, 1) })
}
