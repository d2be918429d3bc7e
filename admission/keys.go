package admission

// The {tenant} hash tag keeps all of a tenant's keys in one Redis Cluster
// slot, so every script touches a single slot.

func logKey(prefix, tenant string) string { return prefix + ":{" + tenant + "}:log" }

func quotasKey(prefix string) string { return prefix + ":quotas" }
