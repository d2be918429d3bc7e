-- unique_lock.lua: gives a parked task's asynq.Unique lock the task's own
-- TTL. asynq sets the lock to last until the task's ProcessAt (ParkedUntil,
-- year 9999) plus the TTL; a task that leaves the dispatcher's hands
-- without going in through it (archived, deleted, run from asynqmon) would
-- then hold its lock for centuries.
--
-- KEYS[1]  asynq's hash of the task, asynq:{<q>}:t:<id>
-- ARGV[1]  the task ID
-- ARGV[2]  the TTL, ms
-- Returns  1 when the lock is the task's and got the TTL, else 0
--
-- The lock key (the hash's unique_key field) is asynq's, in the queue's
-- slot {<q>} like the hash.
local lock = redis.call('HGET', KEYS[1], 'unique_key')
if lock and redis.call('GET', lock) == ARGV[1] then
  redis.call('PEXPIRE', lock, ARGV[2])
  return 1
end
return 0
