// Package bounded runs a Redis call so that its caller waits no longer
// than its context allows, whatever the client: a go-redis client without
// ContextTimeoutEnabled ignores a context's deadline while it waits for a
// reply (up to its ReadTimeout, then again for each retry).
package bounded
