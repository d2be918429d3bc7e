package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// defaultField is the hash field of the default quota. Tenants are never
// empty, so it cannot collide with one.
const defaultField = ""

// maxCachedQuotas bounds the lookup cache of a RedisQuotas.
const maxCachedQuotas = 100_000

// RedisQuotas keeps quotas in the Redis hash {prefix}:quotas, where
// operators change them live (admitq quota set). As a Quotas source it
// answers from a local cache and rereads a tenant's entry once it is older
// than the refresh interval (WithRefresh, DefaultRefresh), in the
// background, so a change reaches every running gate within about a second
// and a lookup costs no round trip on the hot path.
//
// While Redis cannot be reached, a tenant already cached keeps its quota; a
// tenant not yet cached gets an error wrapping ErrUnavailable at once, for
// a while, without waiting. A FailOpen gate then decides locally with the
// last default quota read, if any.
//
// A RedisQuotas is safe for concurrent use. Its only goroutines are the
// background rereads, one per stale tenant at a time, each bounded by the
// timeout.
type RedisQuotas struct {
	rdb  redis.UniversalClient
	key  string
	opts options

	mu          sync.Mutex
	cache       map[string]*cachedQuota
	lastDefault *Quota    // the default as last read, nil for none
	downUntil   time.Time // no reads of uncached tenants before this
	causes      *causes   // names why Redis is unavailable
}

type cachedQuota struct {
	q          Quota
	err        error
	fetched    time.Time
	refreshing bool
}

// NewRedisQuotas returns a quota store on rdb. It honours WithPrefix,
// WithTimeout and WithRefresh.
func NewRedisQuotas(rdb redis.UniversalClient, opts ...Option) *RedisQuotas {
	o := newOptions(opts)
	return &RedisQuotas{rdb: rdb, key: quotasKey(o.prefix), opts: o, cache: make(map[string]*cachedQuota), causes: watchCauses(rdb)}
}

// Set stores tenant's quota. It validates both first and writes nothing when
// either is invalid.
func (r *RedisQuotas) Set(ctx context.Context, tenant string, q Quota) error {
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	return r.set(ctx, tenant, q)
}

// SetDefault stores the quota of tenants that have none of their own.
func (r *RedisQuotas) SetDefault(ctx context.Context, q Quota) error {
	return r.set(ctx, defaultField, q)
}

func (r *RedisQuotas) set(ctx context.Context, field string, q Quota) error {
	b, err := q.MarshalText()
	if err != nil {
		return err
	}
	if err := r.do(ctx, func(ctx context.Context) error { return r.rdb.HSet(ctx, r.key, field, b).Err() }); err != nil {
		return err
	}
	r.invalidate(field)
	return nil
}

// Get returns tenant's own quota, or an error wrapping ErrNoQuota when it has
// none (the default does not count). It always reads Redis.
func (r *RedisQuotas) Get(ctx context.Context, tenant string) (Quota, error) {
	if err := ValidateTenant(tenant); err != nil {
		return Quota{}, err
	}
	return r.get(ctx, tenant)
}

// GetDefault returns the default quota, or an error wrapping ErrNoQuota.
func (r *RedisQuotas) GetDefault(ctx context.Context) (Quota, error) {
	return r.get(ctx, defaultField)
}

func (r *RedisQuotas) get(ctx context.Context, field string) (Quota, error) {
	var v string
	missing := false
	err := r.do(ctx, func(ctx context.Context) (err error) {
		v, err = r.rdb.HGet(ctx, r.key, field).Result()
		if errors.Is(err, redis.Nil) {
			missing = true
			return nil
		}
		return err
	})
	if err != nil {
		return Quota{}, err
	}
	if missing {
		return Quota{}, noQuota(field)
	}
	var q Quota
	if err := q.UnmarshalText([]byte(v)); err != nil {
		return Quota{}, fmt.Errorf("%s: %w", describe(field), err)
	}
	return q, nil
}

// Delete removes tenant's own quota; it then falls back to the default.
// Deleting a tenant that has none is not an error.
func (r *RedisQuotas) Delete(ctx context.Context, tenant string) error {
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	return r.delete(ctx, tenant)
}

// DeleteDefault removes the default quota.
func (r *RedisQuotas) DeleteDefault(ctx context.Context) error {
	return r.delete(ctx, defaultField)
}

func (r *RedisQuotas) delete(ctx context.Context, field string) error {
	if err := r.do(ctx, func(ctx context.Context) error { return r.rdb.HDel(ctx, r.key, field).Err() }); err != nil {
		return err
	}
	r.invalidate(field)
	return nil
}

// List returns every stored quota. An entry that does not decode (written
// by hand, say) makes List fail with an error naming its tenant.
func (r *RedisQuotas) List(ctx context.Context) (StaticQuotas, error) {
	var all map[string]string
	err := r.do(ctx, func(ctx context.Context) (err error) {
		all, err = r.rdb.HGetAll(ctx, r.key).Result()
		return err
	})
	if err != nil {
		return StaticQuotas{}, err
	}
	s := StaticQuotas{Tenants: make(map[string]Quota, len(all))}
	for field, v := range all {
		var q Quota
		if err := q.UnmarshalText([]byte(v)); err != nil {
			return StaticQuotas{}, fmt.Errorf("%s: %w", describe(field), err)
		}
		if field == defaultField {
			s.Default = &q
		} else {
			s.Tenants[field] = q
		}
	}
	return s, nil
}

// Quota returns tenant's quota, else the default, else ErrNoQuota, from the
// local cache. A stale entry is served while one background read refreshes
// it; a missing one is read at once.
func (r *RedisQuotas) Quota(ctx context.Context, tenant string) (Quota, error) {
	now := time.Now()
	r.mu.Lock()
	c, ok := r.cache[tenant]
	if ok && now.Sub(c.fetched) < r.opts.refresh {
		q, err := c.q, c.err
		r.mu.Unlock()
		return q, err
	}
	if ok {
		q, err := c.q, c.err
		if !c.refreshing {
			c.refreshing = true
			go r.refresh(tenant)
		}
		r.mu.Unlock()
		return q, err
	}
	down, def := now.Before(r.downUntil), r.lastDefault
	r.mu.Unlock()
	if down {
		return r.outage(def, fmt.Errorf("%w: quotas %q: Redis did not answer just now", ErrUnavailable, r.key))
	}

	q, err := r.resolve(ctx, tenant)
	if errors.Is(err, ErrUnavailable) {
		r.mu.Lock()
		r.downUntil, def = time.Now().Add(r.opts.refresh), r.lastDefault
		r.mu.Unlock()
		return r.outage(def, err)
	}
	if err != nil && !errors.Is(err, ErrNoQuota) && !errors.Is(err, ErrInvalidQuota) {
		return Quota{}, err // the caller's context ended: nothing worth caching
	}
	r.store(tenant, q, err, now)
	return q, err
}

// outage answers for a tenant not yet cached while Redis is unavailable:
// err, carrying the last default read as a guess when there is one.
// Nothing is cached.
func (r *RedisQuotas) outage(def *Quota, err error) (Quota, error) {
	if def != nil {
		return Quota{}, &guessedQuotaError{q: *def, err: err}
	}
	return Quota{}, err
}

// guessedQuotaError is a quota lookup that failed because Redis is
// unavailable, with the quota that most likely applies. A gate deciding
// locally (FailOpen) may use it; it must never reach Redis's script, which
// would record slots under a quota that may not be the tenant's.
type guessedQuotaError struct {
	q   Quota
	err error
}

func (e *guessedQuotaError) Error() string { return e.err.Error() }
func (e *guessedQuotaError) Unwrap() error { return e.err }

func (r *RedisQuotas) refresh(tenant string) {
	ctx, cancel := context.WithTimeout(context.Background(), r.opts.timeout)
	defer cancel()
	now := time.Now()
	q, err := r.resolve(ctx, tenant)
	if err != nil && !errors.Is(err, ErrNoQuota) && !errors.Is(err, ErrInvalidQuota) {
		// Keep serving what we had; try again on the next lookup.
		r.mu.Lock()
		if c, ok := r.cache[tenant]; ok {
			c.refreshing = false
		}
		r.mu.Unlock()
		return
	}
	r.store(tenant, q, err, now)
}

func (r *RedisQuotas) store(tenant string, q Quota, err error, fetched time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= maxCachedQuotas {
		clear(r.cache) // a flood of distinct tenants must not grow memory without bound
	}
	r.cache[tenant] = &cachedQuota{q: q, err: err, fetched: fetched}
}

// resolve reads tenant's quota and the default in one round trip.
func (r *RedisQuotas) resolve(ctx context.Context, tenant string) (Quota, error) {
	var vals []any
	err := r.do(ctx, func(ctx context.Context) (err error) {
		vals, err = r.rdb.HMGet(ctx, r.key, tenant, defaultField).Result()
		return err
	})
	if err != nil {
		return Quota{}, err
	}
	var def *Quota
	if v, ok := vals[1].(string); ok {
		var q Quota
		if q.UnmarshalText([]byte(v)) == nil {
			def = &q
		}
	}
	r.mu.Lock()
	r.lastDefault = def
	r.mu.Unlock()
	for i, field := range []string{tenant, defaultField} {
		v, ok := vals[i].(string)
		if !ok {
			continue
		}
		var q Quota
		if err := q.UnmarshalText([]byte(v)); err != nil {
			return Quota{}, fmt.Errorf("%s: %w", describe(field), err)
		}
		return q, nil
	}
	return Quota{}, noQuota(tenant)
}

// invalidate drops cached lookups that a write to field changes: one
// tenant's, or every one for the default.
func (r *RedisQuotas) invalidate(field string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if field == defaultField {
		clear(r.cache)
		return
	}
	delete(r.cache, field)
}

// do runs one Redis call under the store's deadline and maps its error.
func (r *RedisQuotas) do(ctx context.Context, call func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, r.opts.timeout)
	defer cancel()
	if err := bounded(cctx, call); err != nil {
		return r.causes.explain(callError(ctx, "quotas", r.key, err))
	}
	return nil
}

func noQuota(field string) error {
	return fmt.Errorf("%w for %s", ErrNoQuota, describe(field))
}

func describe(field string) string {
	if field == defaultField {
		return "the default quota"
	}
	return fmt.Sprintf("tenant %q", field)
}
