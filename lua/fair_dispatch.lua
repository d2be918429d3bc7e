-- fair_dispatch.lua: a fair worker's turn for one queue: its heartbeat,
-- the tasks it finished, the moves of its last turn's grants, then grants
-- while the queue has space. One call a turn: a grant is moved in by the
-- next turn, which the worker runs at once. Runs after
-- fair.lua (KEYS and the first two ARGV are its).
--
-- ARGV[3]  the worker's member "<id>|<concurrency>|<fair 0/1>"
-- ARGV[4]  the member's expiry µs from now (0: leave the queue)
-- ARGV[5]  most grants to make
-- ARGV[6]  n, then n fives: task ID, run time µs, done (1: the task left
--          asynq's hands or will, 0: it will be retried), and its tenant's
--          MaxInFlight and weight now (cap -1: unknown, keep what is stored)
-- then     m, then m move ops, as fair_move.lua takes them: the previous
--          turn's grants, admitted since, go in (or back) here
-- Returns  {n, then n pairs tenant, waiting entry granted (state g: the
--          caller admits and moves them, fair_move.lua), tenants waiting,
--          the earliest wake µs of a tenant asleep (0: none), then the
--          indexes (from 1) of the finishes to hand in again: done, but
--          asynq has yet to take the task out of its active list}
--
-- A finished task's tenant is charged what it ran, less the estimate it
-- was charged at its grant; a task to be retried keeps its place in run
-- (it is still the tenant's, so a cap stays hard) and is charged in full
-- when it runs again.
local member, ttl, most = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
if ttl > 0 then
  call('ZADD', workers, now + ttl, member)
else
  call('ZREM', workers, member)
end

local a = 7
local later = {}
for i = 1, tonumber(ARGV[6]) do
  local id, ran, done = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2] == '1'
  local cap, weight = tonumber(ARGV[a + 3]), ARGV[a + 4]
  a = a + 5
  local r = call('HGET', run, id)
  local state = r and done and call('HGET', TP .. id, 'state')
  if state == 'active' then
    -- The handler returned, asynq has still to mark the task done: until
    -- it does, the task counts as active, so its place stays taken.
    later[#later + 1] = i
  elseif r then
    -- asynq will run it again after all (it counted a late return as a
    -- failure): it keeps its place.
    done = done and state ~= 'retry' and state ~= 'pending' and state ~= 'scheduled'
    local est, since, T = string.match(r, '^%a|([^|]*)|([^|]*)|(.*)$')
    local th = P .. 't:' .. T
    if cap >= 0 then
      call('HSET', th, 'cap', cap, 'wt', weight)
    end
    local h = call('HMGET', th, 'tag', 'wt', 'est', 'used')
    local wt = num(h[2], 1)
    call('HSET', th, 'tag', fmt(num(h[1], 0) + (ran - tonumber(est)) / wt),
      'est', fmt(h[3] and tonumber(h[3]) + (ran - tonumber(h[3])) / 4 or ran),
      'used', fmt(num(h[4], 0) + ran))
    local q = num(call('HGET', meta, 'est'), ran)
    call('HSET', meta, 'est', fmt(q + (ran - q) / 16))
    if done then
      free(id, r)
    else
      call('HSET', run, id, 'p|0|' .. since .. '|' .. T)
      call('HDEL', grants, id)
      eligible(T)
    end
  end
end

moveOps(a)
wake()
recall()
seen()
local out = {0}
if most > 0 then
  local _, fair, total = capacity()
  local picks = {}
  pick(most, room(fair, total), picks)
  out[1] = #picks / 2
  for i = 1, #picks do
    out[#out + 1] = picks[i]
  end
else
  call('HSET', meta, 'floor', fmt(floor))
end
out[#out + 1] = call('ZCARD', vt) + call('ZCARD', sleep)
local first = call('ZRANGE', sleep, 0, 0, 'WITHSCORES')
out[#out + 1] = first[2] and tonumber(first[2]) or 0
for _, i in ipairs(later) do
  out[#out + 1] = i
end
return out
