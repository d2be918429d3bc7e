-- give_back.lua: puts tasks that take.lua took, and no handler ran, back at
-- the end of the pending list that asynq takes from next, as they were:
-- state pending, no lease. A task no longer in the active list (asynq's
-- recoverer or an operator got there first) is left alone.
--
-- KEYS[1]  asynq:{<q>}:pending, KEYS[2] asynq:{<q>}:active,
-- KEYS[3]  asynq:{<q>}:lease
-- ARGV[1]  asynq's task key prefix, asynq:{<q>}:t:
-- ARGV[2]  the pending_since to write, unix ns
-- ARGV[3…] the task IDs, the last taken first
-- Returns  how many went back
local back = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('LREM', KEYS[2], 1, id) > 0 then
    redis.call('ZREM', KEYS[3], id)
    redis.call('HSET', ARGV[1] .. id, 'state', 'pending', 'pending_since', ARGV[2])
    redis.call('RPUSH', KEYS[1], id)
    back = back + 1
  end
end
return back
