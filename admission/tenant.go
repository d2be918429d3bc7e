package admission

import (
	"fmt"
	"hash/maphash"
	"unicode"
	"unicode/utf8"
)

// MaxTenantLen is the longest tenant name, in bytes.
const MaxTenantLen = 256

// ValidateTenant reports whether tenant can be used as a tenant name: 1 to
// MaxTenantLen bytes of valid UTF-8 without control characters. The error
// wraps ErrInvalidTenant.
func ValidateTenant(tenant string) error {
	switch {
	case tenant == "":
		return fmt.Errorf("%w: empty", ErrInvalidTenant)
	case len(tenant) > MaxTenantLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidTenant, len(tenant), MaxTenantLen)
	case !utf8.ValidString(tenant):
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidTenant, tenant)
	}
	for _, r := range tenant {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %q holds control character %U", ErrInvalidTenant, tenant, r)
		}
	}
	return nil
}

// stripe spreads tenants over n locks or counters, by a hash under seed.
// The spread is this process's own: never stored or shared.
func stripe(seed maphash.Seed, tenant string, n int) int {
	return int(maphash.String(seed, tenant) % uint64(n))
}
