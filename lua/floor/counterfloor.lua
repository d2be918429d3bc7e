#!lua flags=allow-cross-slot-keys
-- floor/counterfloor.lua: not a limiter. It takes counter.lua's KEYS and
-- ARGV and answers in its shape, admitting every request, doing the least
-- a counter kept in one value per tenant must do per decision: read the
-- value (one GET) and write it back changed (one SET). Nothing is decoded,
-- no window slides, nothing expires, nothing is deferred. A build with the
-- tag admitq_counterfloor carries it in counter.lua's place, to show what
-- floors Counter mode's cost.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {now}
local keys, b = KEYS, 0 -- counter.lua's quotas start after b
if ARGV[1] == 'windows' then
  keys = {}
  for k = 1, tonumber(ARGV[2]) do
    keys[k] = ARGV[2 + k]
  end
  b = 2 + #keys
end
local nq = tonumber(ARGV[b + 1])
local a = b + 2 + 4 * nq
for k = 1, #keys do
  local limit, n = tonumber(ARGV[b + 4 * tonumber(ARGV[a]) - 2]), tonumber(ARGV[a + 2])
  local used = tonumber(redis.call('GET', keys[k]) or '0') + n
  for _ = 1, n do
    out[#out + 1], out[#out + 2], out[#out + 3] = 0, now, limit - used
  end
  out[#out + 1] = 0
  redis.call('SET', keys[k], string.format('%d', used))
  a = a + 3
end
return out
