-- free.lua: an admission that costs Redis nothing but the call, built in
-- admit.lua's place with the tag admitq_free, to measure what the rest of a
-- caller's path costs: admitq bench --only asynq,enqueue then shows how
-- close enqueue.Client.Enqueue, the gate's round trip and then asynq's
-- write, comes to bare asynq when the admission itself is free. It takes
-- admit.lua's KEYS and ARGV and returns a reply of the same shape, but only
-- reads the clock: every ID is admitted now, with the first quota's whole
-- limit left (whatever its key's quota and not-before time), and nothing is
-- recorded. It is not a limiter.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
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
local out, o = {now}, 1
local a = b + 2 + 4 * tonumber(ARGV[b + 1])
for _ = 1, #logs do
  local n = tonumber(ARGV[a + 2])
  a = a + 3
  for _ = 1, n do
    out[o + 1], out[o + 2], out[o + 3] = 0, now, limit
    o = o + 3
  end
  a = a + n
  o = o + 1
  out[o] = 0
end
return out
