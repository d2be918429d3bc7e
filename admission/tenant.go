package admission

import (
	"fmt"
	"hash/maphash"
	"unicode"
	"unicode/utf8"
)

// MaxTenantLen is the longest tenant name, in bytes.
const MaxTenantLen = 256

// MaxIDLen is the longest entry ID, in bytes: an ID is a member of its
// tenant's log, and through package enqueue an asynq task ID.
const MaxIDLen = 1024

// ValidateTenant reports whether tenant can be used as a tenant name: 1 to
// MaxTenantLen bytes of valid UTF-8 without control characters. The error
// wraps ErrInvalidTenant.
func ValidateTenant(tenant string) error { return validateName(tenant, ErrInvalidTenant) }

// MaxKeyLen is the longest key name (see KeyQuotas), in bytes.
const MaxKeyLen = MaxTenantLen

// ValidateKey reports whether key can be used as a key name (see
// KeyQuotas): like a tenant, 1 to MaxKeyLen bytes of valid UTF-8 without
// control characters. The error wraps ErrInvalidKey.
func ValidateKey(key string) error { return validateName(key, ErrInvalidKey) }

// validateName checks a tenant's or a key's name, with errors wrapping
// sentinel.
func validateName(name string, sentinel error) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", sentinel)
	case len(name) > MaxTenantLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", sentinel, len(name), MaxTenantLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %q is not valid UTF-8", sentinel, name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %q holds control character %U", sentinel, name, r)
		}
	}
	return nil
}

// stripe spreads tenants over n locks or counters, by a hash under seed.
// The spread is this process's own: never stored or shared.
func stripe(seed maphash.Seed, tenant string, n int) int {
	return int(maphash.String(seed, tenant) % uint64(n))
}
