-- ttlfloor.lua: a lower bound on the Redis cost of any limiter on a
-- sliding-window log kept in a sorted set whose logs expire once idle, for
-- BenchmarkScriptFloor with ADMITQ_BENCH_OTHER_SCRIPT=lua/floor/ttlfloor.lua,
-- and in admit.lua's place in a build with the tag admitq_floor.
-- It takes admit.lua's KEYS and ARGV and returns a reply of the same shape.
-- Per tenant it does what every such limiter must: count the log (ZCARD),
-- trim it (here once every 8 entries, or near the limit, as admit.lua
-- does), record each ID that fits (ZADD) and set the log's TTL (PEXPIRE,
-- on every call, as a limiter that does not read the TTL must). It keeps
-- no FIFO and answers no retries, so it is not a correct limiter:
-- admit.lua does both on top, and moves the TTL only when it would fall
-- short, which takes a read of it (PEXPIRETIME) instead. Without its
-- PEXPIRE line it is the least any limiter on a sorted-set log does.
-- It reads the first quota for every key and ignores not-before times, as
-- the benchmarks, which send one quota and none, allow; a retried ID is
-- rejected (code 2) where admit.lua says it was admitted earlier.
local call = redis.call
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nowS = string.format('%.0f', now)
-- admit.lua's ARGV starts after b: its logs are in ARGV on a cluster.
local logs, b = KEYS, 0
if ARGV[1] == 'logs' then
  logs = {}
  for k = 1, tonumber(ARGV[2]) do
    logs[k] = ARGV[2 + k]
  end
  b = 2 + #logs
end
local limit = tonumber(ARGV[b + 2]) -- the first quota's
local trim = string.format('%.0f', now - tonumber(ARGV[b + 3]))
local out, o = {now}, 1
local a = b + 2 + 4 * tonumber(ARGV[b + 1])
for k = 1, #logs do
  local key = logs[k]
  local n = tonumber(ARGV[a + 2])
  a = a + 3
  local card = call('ZCARD', key)
  if card > 0 and (card % 8 + n >= 8 or card + n + 8 > limit) then
    card = card - call('ZREMRANGEBYSCORE', key, '-inf', trim)
  end
  for i = a, a + n - 1 do
    local code = 2
    if card < limit and call('ZADD', key, 'NX', nowS, ARGV[i]) == 1 then
      card = card + 1
      code = 0
    end
    out[o + 1], out[o + 2], out[o + 3] = code, now, limit - card
    o = o + 3
  end
  call('PEXPIRE', key, string.format('%.0f', math.ceil(2 * tonumber(ARGV[b + 3]) / 1000))) -- two windows, ms
  a = a + n
  o = o + 1
  out[o] = 0
end
return out
