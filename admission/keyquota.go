package admission

import (
	"context"
	"errors"
	"fmt"
)

// Key quotas. A key names something tasks share across tenants, such as
// "api:stripe" for every task that calls one API, and each key may have a
// quota of its own, kept beside the tenants' (StaticQuotas.Keys;
// RedisQuotas.SetKey, in the hash {prefix}:keyquotas): a cap on the key's
// tasks pending or active in a dispatched queue, across all tenants
// (MaxInFlight), and a pause (Paused). A task carries keys through
// enqueue.Keys; this package stores, validates and caches their quotas,
// the producer reads them (Gate.KeyQuota) as it hands the task to the
// dispatcher, and package dispatch applies them in the queues a worker
// with a gate serves. A key's quota has no rate limit: Limit is NoLimit
// and the fields only a tenant uses (Window, MaxDelay, Mode, MaxParked,
// Weight) are unset, since a key's tasks are charged to their tenants'
// rates. A key without a quota is unlimited: there is no default.

// KeyQuotas looks up keys' quotas. StaticQuotas and RedisQuotas implement
// it; a Gate whose Quotas does not has no key quotas (Gate.KeyQuota).
type KeyQuotas interface {
	// KeyQuota returns key's quota, and ok false when it has none (it is
	// then unlimited). err is for a quota that cannot be read.
	KeyQuota(ctx context.Context, key string) (q Quota, ok bool, err error)
}

// KeyQuota returns key's quota from Keys, and ok false when it has none.
func (s StaticQuotas) KeyQuota(_ context.Context, key string) (Quota, bool, error) {
	if err := ValidateKey(key); err != nil {
		return Quota{}, false, err
	}
	q, ok := s.Keys[key]
	return q, ok, nil
}

// ValidateAsKey reports whether q can be a key's quota: valid (Validate),
// without a rate limit (Limit NoLimit), and setting nothing but
// MaxInFlight and Paused. The error wraps ErrInvalidQuota and names the
// field.
func (q Quota) ValidateAsKey() error {
	if err := q.Validate(); err != nil {
		return err
	}
	field, value := "", any(nil)
	switch {
	case q.Limit != NoLimit:
		field, value = "Limit", q.Limit
	case q.Window != 0:
		field, value = "Window", q.Window
	case q.MaxDelay != 0:
		field, value = "MaxDelay", q.MaxDelay
	case q.Mode != Log:
		field, value = "Mode", q.Mode
	case q.MaxParked != 0:
		field, value = "MaxParked", q.MaxParked
	case q.Weight != 0:
		field, value = "Weight", q.Weight
	default:
		return nil
	}
	return fmt.Errorf("%w: %s is %v in a key's quota, which only caps (MaxInFlight) and pauses (Paused): want Limit NoLimit and the other fields unset",
		ErrInvalidQuota, field, value)
}

// KeyQuota returns key's quota, and ok false when key has none: it is then
// unlimited. It asks the gate's Quotas when that implements
// KeyQuotas (StaticQuotas and RedisQuotas do; with another, every key is
// unlimited). A RedisQuotas answers from the cache it keeps for tenants'
// quotas, refreshed the same way, so a change reaches every process within
// about a second.
//
// It returns an error wrapping ErrInvalidKey for a bad key name,
// ErrInvalidQuota for a stored quota that does not decode or is not a
// key's (Quota.ValidateAsKey), and ErrUnavailable when Redis cannot be
// reached and key is not cached.
func (g *Gate) KeyQuota(ctx context.Context, key string) (q Quota, ok bool, err error) {
	if err := g.made(); err != nil {
		return Quota{}, false, err
	}
	if err := ValidateKey(key); err != nil {
		return Quota{}, false, err
	}
	kq, has := g.quotas.(KeyQuotas)
	if !has {
		return Quota{}, false, nil
	}
	q, ok, err = kq.KeyQuota(ctx, key)
	if err != nil {
		return Quota{}, false, g.causes.explain(err)
	}
	if !ok {
		return Quota{}, false, nil
	}
	if err := q.ValidateAsKey(); err != nil {
		return Quota{}, false, fmt.Errorf("key %q: %w", key, err)
	}
	return q, true, nil
}

// SetKey stores key's quota, in the hash {prefix}:keyquotas. It validates
// both first (ValidateKey, Quota.ValidateAsKey) and writes nothing when
// either is invalid.
func (r *RedisQuotas) SetKey(ctx context.Context, key string, q Quota) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := q.ValidateAsKey(); err != nil {
		return fmt.Errorf("key %q: %w", key, err)
	}
	return r.write(ctx, &r.keys, key, &q)
}

// GetKey returns key's quota, or an error wrapping ErrNoQuota when it has
// none. It always reads Redis.
func (r *RedisQuotas) GetKey(ctx context.Context, key string) (Quota, error) {
	if err := ValidateKey(key); err != nil {
		return Quota{}, err
	}
	return r.read(ctx, &r.keys, key)
}

// DeleteKey removes key's quota; the key is then unlimited. Deleting a key
// that has none is not an error.
func (r *RedisQuotas) DeleteKey(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return r.write(ctx, &r.keys, key, nil)
}

// ListKeys returns every stored key quota, by key, read a page at a time
// like List. An entry that does not decode, or is not a key's quota, makes
// it fail with an error naming its key.
func (r *RedisQuotas) ListKeys(ctx context.Context) (map[string]Quota, error) {
	keys := make(map[string]Quota)
	err := r.scan(ctx, &r.keys, "*", func(key string, q Quota, err error) error {
		if err != nil {
			return err
		}
		keys[key] = q
		return nil
	})
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// KeyQuota returns key's quota from the local cache, and ok false when it
// has none, like Quota does for tenants: a stale entry is served while one
// background read refreshes it, and a missing one is read at once. While
// Redis cannot be reached, a key not yet cached gets an error wrapping
// ErrUnavailable.
func (r *RedisQuotas) KeyQuota(ctx context.Context, key string) (Quota, bool, error) {
	if err := ValidateKey(key); err != nil {
		return Quota{}, false, err
	}
	q, err := r.lookup(ctx, &r.keys, key)
	switch {
	case errors.Is(err, ErrNoQuota):
		return Quota{}, false, nil
	case err != nil:
		return Quota{}, false, err
	}
	return q, true, nil
}
