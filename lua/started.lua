-- started.lua: marks a task's first start in asynq's own record of the task,
-- so that the mark lives exactly as long as the task does.
--
-- KEYS[1]  asynq's task hash: asynq:{<queue>}:t:<task id>
-- ARGV[1]  the hash field that holds the mark
-- Returns  1 when this is the task's first start (the mark is set now),
--          0 when the task has started before (the mark was there),
--          -1 when the task hash does not exist (nothing is written, so a
--          task deleted meanwhile leaves no key behind).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
return redis.call('HSETNX', KEYS[1], ARGV[1], '1')
