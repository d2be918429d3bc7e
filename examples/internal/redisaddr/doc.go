// Package redisaddr is what the examples share to reach Redis: the
// -redis flag and ADMITQ_REDIS, read as host:port or a redis:// URL as the
// admitq command reads them, and a PING at startup that names the cause
// when Redis cannot be reached.
//
// It is internal to the examples. A program copied from one of them needs
// this file too, or its own way to build a *redis.Options.
package redisaddr
