package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/internal/bounded"
)

// defaultField is the hash field of the default quota. Tenants are never
// empty, so it cannot collide with one.
const defaultField = ""

// RedisQuotas keeps quotas in the Redis hash {prefix}:quotas, where
// operators change them live (admitq quota set): a field per tenant, and
// the default quota under the empty field. Keys' quotas (KeyQuotas) live
// in a hash of their own, {prefix}:keyquotas, a field per key, with no
// default: the two never share a field name, and listing one never reads
// the other. Each field holds the quota's JSON (Quota.MarshalText).
//
// As a Quotas and KeyQuotas source it answers from a local cache and
// rereads an entry once it is older than the refresh interval
// (WithRefresh, DefaultRefresh), in the background, so a change reaches
// every running gate within about a second and a lookup costs no round
// trip on the hot path. An entry older than the refresh interval and a
// second more (a name not looked up for that long) is read again before
// it is answered: no lookup answers a quota read more than that long
// before a change, so a producer idle for an hour does not act, or write
// into a dispatched queue's records, on an hour-old cap.
//
// While Redis cannot be reached, a tenant or key already cached keeps its
// quota; one not yet cached gets an error wrapping ErrUnavailable at once,
// for a while, without waiting. A FailOpen gate then decides a tenant
// locally with the last default quota read, if any.
//
// Each cache (tenants', keys') holds the names looked up most recently
// (WithQuotaCacheSize, DefaultQuotaCacheSize) and evicts the least
// recently used one when full.
//
// Writes (Set, SetDefault, Delete, DeleteDefault, SetKey, DeleteKey) first
// check, once per RedisQuotas, that Redis is recent enough for the gates
// that read the quotas (ErrRedisVersion).
//
// A RedisQuotas is safe for concurrent use. Its only goroutines are the
// background rereads, at most one at a time for tenants and one for keys,
// which read the stale entries found meanwhile in batches, one round trip
// per batch, each bounded by the timeout.
type RedisQuotas struct {
	rdb     redis.UniversalClient
	key     string // the tenants' hash; tenants.hash
	opts    options
	causes  *causes // names why Redis is unavailable
	version *versionCheck

	mu          sync.Mutex
	tenants     quotaTable
	keys        quotaTable
	lastDefault *Quota // the default as last read, nil for none
}

// quotaTable is the local cache of one hash of quotas: the tenants' or the
// keys'. RedisQuotas's mutex guards it.
type quotaTable struct {
	hash      string
	forKeys   bool // the keys' table: no default, names are keys
	cache     *quotaCache
	downUntil time.Time // no reads of uncached names before this
	stale     []string  // names waiting for the background reread
	rereading bool      // the background reread is running
}

// maxResolveBatch bounds the fields of one HMGET: big enough to amortize
// the round trip, small enough that Redis answers it in about a
// millisecond.
const maxResolveBatch = 1000

// NewRedisQuotas returns a quota store on rdb. It honours WithPrefix,
// WithTimeout, WithRefresh and WithQuotaCacheSize.
func NewRedisQuotas(rdb redis.UniversalClient, opts ...Option) *RedisQuotas {
	o := newOptions(opts)
	return &RedisQuotas{
		rdb: rdb, key: quotasKey(o.prefix), opts: o,
		causes: watchCauses(rdb), version: newVersionCheck(rdb, o.timeout, nil),
		tenants: quotaTable{hash: quotasKey(o.prefix), cache: newQuotaCache(o.quotaCacheSize)},
		keys:    quotaTable{hash: keyQuotasKey(o.prefix), forKeys: true, cache: newQuotaCache(o.quotaCacheSize)},
	}
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
	return r.write(ctx, &r.tenants, field, &q)
}

// write stores q under field of t's hash, or deletes field for a nil q,
// and drops what the cache holds of it.
func (r *RedisQuotas) write(ctx context.Context, t *quotaTable, field string, q *Quota) error {
	var b []byte
	if q != nil {
		var err error
		if b, err = q.MarshalText(); err != nil {
			return err
		}
	}
	if err := r.checkVersion(ctx); err != nil {
		return err
	}
	err := r.do(ctx, func(ctx context.Context) error {
		if b == nil {
			return r.rdb.HDel(ctx, t.hash, field).Err()
		}
		return r.rdb.HSet(ctx, t.hash, field, b).Err()
	})
	if err != nil {
		return err
	}
	r.invalidate(t, field)
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
	return r.read(ctx, &r.tenants, field)
}

// read reads field of t's hash.
func (r *RedisQuotas) read(ctx context.Context, t *quotaTable, field string) (Quota, error) {
	var v string
	missing := false
	err := r.do(ctx, func(ctx context.Context) (err error) {
		v, err = r.rdb.HGet(ctx, t.hash, field).Result()
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
		return Quota{}, t.noQuota(field)
	}
	dec := quotaDecoder{forKeys: t.forKeys}
	return dec.decode(field, v)
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
	return r.write(ctx, &r.tenants, field, nil)
}

// List returns every stored quota, read a page at a time (see Scan). An
// entry that does not decode (written by hand, say) makes List fail with
// an error naming its tenant.
func (r *RedisQuotas) List(ctx context.Context) (StaticQuotas, error) {
	s := StaticQuotas{Tenants: make(map[string]Quota)}
	err := r.scan(ctx, &r.tenants, "*", func(field string, q Quota, err error) error {
		switch {
		case err != nil:
			return err
		case field == defaultField:
			s.Default = &q
		default:
			s.Tenants[field] = q
		}
		return nil
	})
	if err != nil {
		return StaticQuotas{}, err
	}
	return s, nil
}

// Scan calls fn with each stored quota of a tenant whose name matches
// pattern, a Redis glob ("*" or "" for every tenant; see SCAN's MATCH),
// not the default's (GetDefault reads it). err is set, wrapping
// ErrInvalidQuota, for an entry that does not decode; fn returning an
// error stops the scan, which returns it.
//
// Scan reads the hash a page (HSCAN) at a time, each page under the
// store's per-call timeout (but at least a second), the whole scan under
// the bulk timeout
// (WithBulkTimeout, DefaultBulkTimeout): a large hash is read however
// long it takes, while a Redis that stops answering fails the page it is
// on. Entries written or deleted meanwhile may or may not be seen, and
// an entry may come twice when Redis resizes the hash mid-scan.
func (r *RedisQuotas) Scan(ctx context.Context, pattern string, fn func(tenant string, q Quota, err error) error) error {
	if pattern == "" {
		pattern = "*"
	}
	return r.scan(ctx, &r.tenants, pattern, func(field string, q Quota, err error) error {
		if field == defaultField {
			return nil
		}
		return fn(field, q, err)
	})
}

// scanPage is how many entries one HSCAN asks for: a reply of some 50 KB,
// which Redis builds in well under a millisecond.
const scanPage = 1000

// scan reads t's hash a page at a time, as Scan says, and calls fn with
// each entry whose field matches pattern.
func (r *RedisQuotas) scan(ctx context.Context, t *quotaTable, pattern string, fn func(field string, q Quota, err error) error) error {
	bctx, cancel := context.WithTimeoutCause(ctx, r.opts.bulkTimeout, errBulkTimeout(r.opts.bulkTimeout))
	defer cancel()
	var cursor uint64
	read := 0
	dec := quotaDecoder{forKeys: t.forKeys}
	for {
		var page []string
		var next uint64
		err := bulkCall(bctx, r.opts.pageTimeout(), func(ctx context.Context) (err error) {
			page, next, err = r.rdb.HScan(ctx, t.hash, cursor, pattern, scanPage).Result()
			return err
		})
		if err != nil {
			return bulkError(ctx, bctx, fmt.Sprintf("list quotas %q, after %d entries", t.hash, read), err)
		}
		for i := 0; i+1 < len(page); i += 2 {
			field := page[i]
			q, derr := dec.decode(field, page[i+1])
			if err := fn(field, q, derr); err != nil {
				return err
			}
			read++
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// errBulkTimeout is the cause of a bulk read's end at its deadline.
func errBulkTimeout(d time.Duration) error {
	return fmt.Errorf("%w: the bulk timeout (%v) passed", context.DeadlineExceeded, d)
}

// minPageTimeout is the least time a round trip of a bulk read gets: it
// carries hundreds of entries, not one decision, and an operator's listing
// had better wait a little on a loaded Redis than fail; a Redis that is
// gone still fails it within a second.
const minPageTimeout = time.Second

// pageTimeout is the deadline of one round trip of a bulk read.
func (o options) pageTimeout() time.Duration { return max(o.timeout, minPageTimeout) }

// bulkCall runs one round trip of a bulk read under timeout.
func bulkCall(bctx context.Context, timeout time.Duration, call func(context.Context) error) error {
	pctx, cancel := context.WithTimeout(bctx, timeout)
	defer cancel()
	return bounded.Call(pctx, call)
}

// bulkError maps the failure of one round trip of a bulk read: the
// caller's context error when ctx is done, the bulk timeout when bctx
// (ctx's child) is, and otherwise what callError makes of it.
func bulkError(ctx, bctx context.Context, what string, err error) error {
	switch {
	case ctx.Err() != nil:
		err = context.Cause(ctx)
	case bctx.Err() != nil:
		err = context.Cause(bctx)
	case unavailable(err):
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
	}
	return fmt.Errorf("admitq: %s: %w", what, err)
}

// quotaDecoder decodes the entries of one bulk read, remembering the
// quotas it has decoded: most tenants share a few quotas, and decoding
// costs far more than a map lookup.
type quotaDecoder struct {
	seen    map[string]Quota
	forKeys bool // the entries are keys': each must be a key's quota
}

// decode decodes field's entry v.
func (d *quotaDecoder) decode(field, v string) (Quota, error) {
	if q, ok := d.seen[v]; ok {
		return q, nil
	}
	var q Quota
	err := q.UnmarshalText([]byte(v))
	if err == nil && d.forKeys {
		err = q.ValidateAsKey()
	}
	if err != nil {
		return Quota{}, fmt.Errorf("%s: %w", describeIn(d.forKeys, field), err)
	}
	if d.seen == nil {
		d.seen = make(map[string]Quota)
	}
	if len(d.seen) < 4096 {
		d.seen[v] = q
	}
	return q, nil
}

// QuotaResult is one tenant's answer from GetBatch.
type QuotaResult struct {
	Quota Quota
	// Err wraps ErrNoQuota when the tenant has no quota of its own, and
	// ErrInvalidQuota when its entry does not decode.
	Err error
}

// GetBatch returns each tenant's own quota, like Get, in order, with one
// round trip per thousand tenants. It returns an error, and no results,
// only when Redis does not answer or a tenant is invalid.
func (r *RedisQuotas) GetBatch(ctx context.Context, tenants []string) ([]QuotaResult, error) {
	for _, t := range tenants {
		if err := ValidateTenant(t); err != nil {
			return nil, err
		}
	}
	bctx, cancel := context.WithTimeoutCause(ctx, r.opts.bulkTimeout, errBulkTimeout(r.opts.bulkTimeout))
	defer cancel()
	res := make([]QuotaResult, 0, len(tenants))
	var dec quotaDecoder
	for chunk := range slices.Chunk(tenants, maxResolveBatch) {
		var vals []any
		err := bulkCall(bctx, r.opts.pageTimeout(), func(ctx context.Context) (err error) {
			vals, err = r.rdb.HMGet(ctx, r.key, chunk...).Result()
			return err
		})
		if err != nil {
			return nil, bulkError(ctx, bctx, fmt.Sprintf("get quotas %q, after %d of %d tenants", r.key, len(res), len(tenants)), err)
		}
		if len(vals) != len(chunk) {
			return nil, fmt.Errorf("admitq: quotas %q: HMGET returned %d values for %d fields", r.key, len(vals), len(chunk))
		}
		for i, v := range vals {
			var qr QuotaResult
			if s, ok := v.(string); ok {
				qr.Quota, qr.Err = dec.decode(chunk[i], s)
			} else {
				qr.Err = noQuota(chunk[i])
			}
			res = append(res, qr)
		}
	}
	return res, nil
}

// Quota returns tenant's quota, else the default, else ErrNoQuota, from the
// local cache. A stale entry is served while one background read refreshes
// it; a missing one is read at once. An invalid tenant (ValidateTenant)
// gets ErrInvalidTenant.
func (r *RedisQuotas) Quota(ctx context.Context, tenant string) (Quota, error) {
	if err := ValidateTenant(tenant); err != nil {
		return Quota{}, err
	}
	return r.lookup(ctx, &r.tenants, tenant)
}

// lookup returns name's quota from t's cache, as Quota and KeyQuota say.
func (r *RedisQuotas) lookup(ctx context.Context, t *quotaTable, name string) (Quota, error) {
	now := time.Now()
	r.mu.Lock()
	c, ok := t.cache.get(name)
	if ok && now.Sub(c.fetched) < r.opts.refresh {
		q, err := c.q, c.err
		r.mu.Unlock()
		return q, err
	}
	tooOld := ok && now.Sub(c.fetched) >= r.opts.refresh+r.opts.staleFor
	if ok && !tooOld {
		q, err := c.q, c.err
		if !c.refreshing {
			c.refreshing = true
			t.stale = append(t.stale, name)
			if !t.rereading {
				t.rereading = true
				go r.reread(t)
			}
		}
		r.mu.Unlock()
		return q, err
	}
	// Missing, or too old to answer: read it now. While Redis cannot
	// say, an old entry is answered as it is, a missing one gets outage.
	var oldQ Quota
	var oldErr error
	if tooOld {
		oldQ, oldErr = c.q, c.err
	}
	down, def := now.Before(t.downUntil), r.lastDefault
	r.mu.Unlock()
	unavailable := func(def *Quota, err error) (Quota, error) {
		if tooOld {
			return oldQ, oldErr
		}
		if t.forKeys {
			def = nil // keys have no default to guess with
		}
		return r.outage(def, err)
	}
	if down {
		return unavailable(def, fmt.Errorf("%w: quotas %q: Redis did not answer just now", ErrUnavailable, t.hash))
	}

	q, err := r.resolve(ctx, t, name)
	if errors.Is(err, ErrUnavailable) {
		r.mu.Lock()
		t.downUntil, def = time.Now().Add(r.opts.refresh), r.lastDefault
		r.mu.Unlock()
		return unavailable(def, err)
	}
	if err != nil && !errors.Is(err, ErrNoQuota) && !errors.Is(err, ErrInvalidQuota) {
		return Quota{}, err // the caller's context ended: nothing worth caching
	}
	r.store(t, name, q, err, now)
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

// reread refreshes t's stale entries, a batch a round trip, until none
// is left. A batch Redis does not answer is dropped: its entries keep
// their quotas and are read again at their next lookup.
func (r *RedisQuotas) reread(t *quotaTable) {
	for {
		r.mu.Lock()
		n := min(len(t.stale), maxResolveBatch)
		if n == 0 {
			t.stale, t.rereading = nil, false
			r.mu.Unlock()
			return
		}
		batch := slices.Clone(t.stale[:n])
		t.stale = t.stale[n:]
		r.mu.Unlock()

		ctx, cancel := context.WithTimeout(context.Background(), r.opts.timeout)
		now := time.Now()
		qs, errs, err := r.resolveMany(ctx, t, batch)
		cancel()
		r.mu.Lock()
		for i, name := range batch {
			switch {
			case err == nil:
				t.cache.update(name, qs[i], errs[i], now)
			default:
				// Keep serving what we had; try again on the next lookup.
				if c, ok := t.cache.peek(name); ok {
					c.refreshing = false
				}
			}
		}
		r.mu.Unlock()
	}
}

// store caches a lookup in t; a full cache evicts its least recently used
// entry.
func (r *RedisQuotas) store(t *quotaTable, name string, q Quota, err error, fetched time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t.cache.put(name, q, err, fetched)
}

// resolve reads name's quota from t's hash (for a tenant, with the default)
// in one round trip.
func (r *RedisQuotas) resolve(ctx context.Context, t *quotaTable, name string) (Quota, error) {
	qs, errs, err := r.resolveMany(ctx, t, []string{name})
	if err != nil {
		return Quota{}, err
	}
	return qs[0], errs[0]
}

// resolveMany reads the quota of each name from t's hash with one HMGET:
// for a tenant its own, else the default, read in the same HMGET; for a
// key its own. err is set when Redis did not answer; errs[i] when names[i]
// has no quota (ErrNoQuota) or one that does not decode (ErrInvalidQuota).
func (r *RedisQuotas) resolveMany(ctx context.Context, t *quotaTable, names []string) (qs []Quota, errs []error, err error) {
	fields := slices.Clone(names)
	if !t.forKeys {
		fields = append(fields, defaultField)
	}
	var vals []any
	err = r.do(ctx, func(ctx context.Context) (err error) {
		vals, err = r.rdb.HMGet(ctx, t.hash, fields...).Result()
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if len(vals) != len(fields) {
		return nil, nil, fmt.Errorf("admitq: quotas %q: HMGET returned %d values for %d fields", t.hash, len(vals), len(fields))
	}
	if t.forKeys {
		qs, errs = make([]Quota, len(names)), make([]error, len(names))
		dec := quotaDecoder{forKeys: true}
		for i, key := range names {
			if v, ok := vals[i].(string); ok {
				qs[i], errs[i] = dec.decode(key, v)
			} else {
				errs[i] = t.noQuota(key)
			}
		}
		return qs, errs, nil
	}
	var def *Quota
	var defErr error
	if v, ok := vals[len(names)].(string); ok {
		var q Quota
		if defErr = q.UnmarshalText([]byte(v)); defErr == nil {
			def = &q
		} else {
			defErr = fmt.Errorf("%s: %w", describe(defaultField), defErr)
		}
	}
	r.mu.Lock()
	r.lastDefault = def
	r.mu.Unlock()
	qs, errs = make([]Quota, len(names)), make([]error, len(names))
	var dec quotaDecoder
	for i, name := range names {
		v, ok := vals[i].(string)
		switch {
		case ok:
			qs[i], errs[i] = dec.decode(name, v)
		case def != nil:
			qs[i] = *def
		case defErr != nil:
			errs[i] = defErr
		default:
			errs[i] = noQuota(name)
		}
	}
	return qs, errs, nil
}

// invalidate drops cached lookups that a write to field of t changes: one
// tenant's or key's, or every tenant's for the default.
func (r *RedisQuotas) invalidate(t *quotaTable, field string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !t.forKeys && field == defaultField {
		t.cache.clear()
		return
	}
	t.cache.remove(field)
}

// checkVersion returns an error wrapping ErrRedisVersion, before a write,
// when Redis (any master of a cluster) is older than MinRedisVersion: the
// gates that would read the quota refuse such a server. Redis is asked
// once per RedisQuotas, and the write waits up to the store's timeout for
// the answer; a Redis that does not answer in time fails the write itself.
func (r *RedisQuotas) checkVersion(ctx context.Context) error {
	return r.version.check(ctx, r.opts.timeout)
}

// do runs one Redis call under the store's deadline and maps its error.
func (r *RedisQuotas) do(ctx context.Context, call func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, r.opts.timeout)
	defer cancel()
	if err := bounded.Call(cctx, call); err != nil {
		return r.causes.explain(callError(ctx, "quotas", r.key, err))
	}
	return nil
}

// noQuota is the error for field of t's hash that holds no quota.
func (t *quotaTable) noQuota(field string) error {
	return fmt.Errorf("%w for %s", ErrNoQuota, describeIn(t.forKeys, field))
}

func noQuota(field string) error { return fmt.Errorf("%w for %s", ErrNoQuota, describe(field)) }

// describeIn names field of the keys' hash, or of the tenants'.
func describeIn(forKeys bool, field string) string {
	if forKeys {
		return fmt.Sprintf("key %q", field)
	}
	return describe(field)
}

func describe(field string) string {
	if field == defaultField {
		return "the default quota"
	}
	return fmt.Sprintf("tenant %q", field)
}
