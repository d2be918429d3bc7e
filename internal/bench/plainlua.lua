-- plainlua.lua: the "plain Lua" sliding-window log of the design notes
-- (background/002), a baseline for admitq bench. Not admitq's slot rule: it
-- only admits or rejects, and the caller's clock sets the scores.
--
-- KEYS[1]  the client's log: a ZSET of member -> request time, ms
-- ARGV[1]  now, ms (the caller's clock)
-- ARGV[2]  window, ms
-- ARGV[3]  limit
-- ARGV[4]  member to record, unique per request
-- Returns  1 allowed (recorded), 0 denied (nothing recorded)
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. (now - window))
if redis.call('ZCARD', key) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', key, now, ARGV[4])
-- A bit longer than the window, so an idle client's key goes away.
redis.call('PEXPIRE', key, window + 1000)
return 1
