package admission

// The {tenant} hash tag keeps all of a tenant's keys in one Redis Cluster
// slot, so every script touches a single slot.

func logKey(prefix, tenant string) string { return prefix + ":{" + tenant + "}:log" }

func counterKey(prefix, tenant string) string { return prefix + ":{" + tenant + "}:cnt" }

// windowKey is the key that keeps tenant's window under q.
func windowKey(prefix, tenant string, q Quota) string {
	if q.Mode == Counter {
		return counterKey(prefix, tenant)
	}
	return logKey(prefix, tenant)
}

func quotasKey(prefix string) string { return prefix + ":quotas" }

// keyQuotasKey is the hash of keys' quotas (see KeyQuotas), apart from the
// tenants': a key may share a tenant's name, and neither listing reads
// the other's entries.
func keyQuotasKey(prefix string) string { return prefix + ":keyquotas" }
