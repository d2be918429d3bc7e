-- floor.lua: a lower bound on the Redis cost of any sliding-window log kept
-- in a sorted set, for BenchmarkScriptFloor. It takes admit.lua's KEYS and
-- ARGV and returns a reply of the same shape, but per tenant it only trims
-- the log and records each ID: the two writes such a log cannot do
-- without. It does not count, keep FIFO, answer retries or keep a TTL, so
-- it is not a limiter; admit.lua does all of that on top.
local call = redis.call
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nowS = string.format('%.0f', now)
local trim = string.format('%.0f', now - tonumber(ARGV[3])) -- the first quota's window
local out, o = {now}, 1
local a = 2 + 4 * tonumber(ARGV[1])
for k = 1, #KEYS do
  local key = KEYS[k]
  local n = tonumber(ARGV[a + 2])
  a = a + 3
  call('ZREMRANGEBYSCORE', key, '-inf', trim)
  for i = a, a + n - 1 do
    call('ZADD', key, 'NX', nowS, ARGV[i])
    out[o + 1], out[o + 2], out[o + 3] = 0, now, 1
    o = o + 3
  end
  a = a + n
  o = o + 1
  out[o] = 0
end
return out
