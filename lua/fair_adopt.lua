-- fair_adopt.lua: counts tasks run from outside (asynqmon's "run now",
-- Inspector.RunTask and RunAll) against their tenants' places: a task of a
-- tenant the queue has a record of that asynq holds pending or active, and
-- that the dispatcher did not let in, enters run in state p, charged as a
-- grant, so that a cap is true again. Its waiting entry is dropped at its
-- turn. Runs after fair.lua (KEYS and the first two ARGV are its).
--
-- ARGV[3]  n, then n quads: task ID, its tenant, its flow (package rule's
--          FlowID, from the task's headers: its keys count too) and its
--          asynq.Deadline µs (0: none)
-- Returns  {tasks adopted}
--
-- An adopted task's deadline is recorded, so that the repair pass archives
-- it once it is overdue in asynq's retry set (overdue) and frees its place,
-- which its retries would hold through their whole backoff: a task run
-- again from asynq's archive after its deadline, say.
local adopted = 0
local a = 4
for _ = 1, tonumber(ARGV[3]) do
  local id, T, f, d = ARGV[a], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  a = a + 4
  local st = call('HGET', TP .. id, 'state')
  local th = P .. 't:' .. T
  if (st == 'pending' or st == 'active' and not lapsed(id)) and call('HEXISTS', run, id) == 0 and call('EXISTS', th) == 1 then
    grant(T, id, nil, math.max(toint(call('HGET', th, 'tag')), floor), 'p', f)
    if d > 0 then
      call('HSET', deadlines, id, d)
    else
      call('HDEL', deadlines, id) -- an earlier task's of the ID
    end
    refresh(T)
    adopted = adopted + 1
  end
end
save()
return {adopted}
