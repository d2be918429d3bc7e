-- take.lua: asynq's look into a queue (RDB.Dequeue's script), for up to n
-- tasks at once: each as asynq takes one, from the end of the pending list
-- it takes from into the active list, state active, leased until the
-- time asynq gave. A worker with a gate runs it when several of its slots
-- are free, and hands asynq the tasks one look at a time (worker.takeAhead).
--
-- KEYS[1]  asynq:{<q>}:pending, KEYS[2] asynq:{<q>}:paused,
-- KEYS[3]  asynq:{<q>}:active, KEYS[4] asynq:{<q>}:lease
-- ARGV[1]  the leases' expiry, unix seconds (asynq's)
-- ARGV[2]  asynq's task key prefix, asynq:{<q>}:t:
-- ARGV[3]  n, the most tasks to take
-- Returns  the tasks taken, in the order taken: task ID, then its message
--          (asynq's msg field), for each; none while the queue is paused.
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {}
end
local out = {}
for _ = 1, tonumber(ARGV[3]) do
  local id = redis.call('RPOPLPUSH', KEYS[1], KEYS[3])
  if not id then
    break
  end
  local key = ARGV[2] .. id
  redis.call('HSET', key, 'state', 'active')
  redis.call('HDEL', key, 'pending_since')
  redis.call('ZADD', KEYS[4], ARGV[1], id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', key, 'msg')
end
return out
