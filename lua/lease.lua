-- lease.lua: sets how long a task's permit lasts, on Redis time.
--
-- KEYS[1]  permits: a ZSET of task ref -> lease expiry µs
-- ARGV[1]  the task ref
-- ARGV[2]  lease µs from now
-- ARGV[3]  "hold": take the permit if the task has none (a task found
--          running without one: retried after its worker died, or enqueued
--          before the cap was set), else renew it; "renew": renew only a
--          permit the task holds
-- Returns  1 when the task holds a permit afterwards, 0 otherwise
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local expiry = string.format('%.0f', now + tonumber(ARGV[2]))
if ARGV[3] ~= 'hold' and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
return 1
