-- usage.lua: what a tenant's log holds right now. Read-only.
--
-- KEYS[1]  the tenant's log: a ZSET of entry ID -> slot (Redis time, µs)
-- ARGV[1]  limit
-- ARGV[2]  window µs
-- Returns  {now µs, entries in the window (now-window, now], reservations after now,
--          next free slot µs: when a request arriving now would be given a slot}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local nowS = string.format('%.0f', now)
local inWindow = redis.call('ZCOUNT', key, '(' .. string.format('%.0f', now - window), nowS)
local ahead = redis.call('ZCOUNT', key, '(' .. nowS, '+inf')
local next = now
if inWindow + ahead > 0 then
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  next = math.max(next, tonumber(last[2]))
end
if inWindow + ahead >= limit then
  local e = redis.call('ZRANGE', key, -limit, -limit, 'WITHSCORES')
  next = math.max(next, tonumber(e[2]) + window)
end
return {now, inWindow, ahead, next}
