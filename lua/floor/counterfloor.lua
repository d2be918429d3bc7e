#!lua
-- floor/counterfloor.lua: not a limiter. It takes counter.lua's KEYS and
-- ARGV (one key, or a batch) and answers in its shape, admitting every
-- request, doing the least a bucketed counter kept in a hash must do per
-- decision: read the window's sum and the current bucket (one HMGET) and
-- write both back (one HSET). No window slides, nothing expires, nothing
-- is deferred. A build with the tag admitq_counterfloor carries it in
-- counter.lua's place, to show what floors Counter mode's cost.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {now}

local function decide(key, a)
  local width = math.floor(tonumber(ARGV[a + 2]) / tonumber(ARGV[a + 5]))
  local b = string.format('%d', math.floor(now / width))
  local v = redis.call('HMGET', key, 'ws', b)
  local n, limit = tonumber(ARGV[a + 6]), tonumber(ARGV[a + 1])
  local ws = (tonumber(v[1]) or 0) + n
  for _ = 1, n do
    out[#out + 1], out[#out + 2], out[#out + 3] = 0, now, limit - ws
  end
  out[#out + 1] = 0
  redis.call('HSET', key, 'ws', string.format('%d', ws), b, string.format('%d', (tonumber(v[2]) or 0) + n))
end

if ARGV[1] ~= 'batch' then
  decide(KEYS[1], 0)
else
  for k = 1, #KEYS do
    decide(KEYS[k], 1 + 7 * (k - 1))
  end
end
return out
