-- fair_dispatch.lua: a gate worker's turn for one queue: its heartbeat,
-- the tasks it finished, the moves of its last turn's grants, then grants
-- while the queue has space. One call a turn: a grant is moved in by the
-- next turn, which the worker runs at once. Runs after fair.lua (KEYS and
-- the first two ARGV are its).
--
-- ARGV[3]  the worker's member "<id>|<concurrency>|<fair 0/1>"
-- ARGV[4]  the member's expiry µs from now (0: leave the queue; the member
--          then lapses now, and still holds the queue dispatched for
--          RESTART_GRACE)
-- ARGV[5]  most grants to make
-- ARGV[6]  n, then n eights: task ID, run time µs, done (1: the task left
--          asynq's hands or will, 0: it will be retried), its tenant's
--          MaxInFlight, weight in thousandths and paused (1 or 0) now (cap
--          -1: unknown, keep what is stored), how long to hold the
--          tenant's waiting tasks, µs (0: not at all; worker.Throttled),
--          and a key to hold instead of the tenant ("" for none;
--          worker.ThrottledKey)
-- then     m, then m move ops, as fair_move.lua takes them: the previous
--          turn's grants, admitted since, go in (or back) here
-- then     k, then k quads: tenant, MaxInFlight, weight in thousandths,
--          paused: tenants' quotas as they are now (a pause or a resume)
-- then     j, then j triples: key, MaxInFlight, paused: keys' quotas now
-- Returns  {n, then n pairs tenant, waiting entry granted (state g: the
--          caller admits and moves them), tenants waiting, the earliest µs
--          a sleeping tenant wakes or an entry in limbo is due (0: none),
--          then the indexes (from 1) of the finishes to hand in again:
--          done, but asynq has yet to take the task out of its active list}
--
-- A finished task's tenant is charged what it ran, less the estimate it
-- was charged at its grant; a task to be retried keeps its place in run
-- (it is still the tenant's, so a cap stays hard) and is charged in full
-- when it runs again. A finished task that asynq keeps parked again (Redis
-- came back from a snapshot taken between its grant and its move) goes
-- back to the head of its tenant's line.
local member, ttl, most = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
call('ZADD', workers, int(now + math.max(ttl, 0)), member)

-- finish hands in task id, which ran for ran µs. It reads the tenant's
-- record once and writes it once.
local function finish(id, ran, done, cap, wm, paused, hold, key)
  local r = call('HGET', run, id)
  if not r then
    return true
  end
  local state = done and call('HGET', TP .. id, 'state')
  if state == 'active' then
    return false -- asynq has still to mark it done: its place stays taken
  end
  local s, est, since, T, f = runEntry(r)
  local th = P .. 't:' .. T
  local h = call('HMGET', th, 'tag', 'wm', 'est', 'used', 'n', 'cap', 'paused', 'l', 'wk')
  if cap < 0 then
    cap, wm, paused = toint(h[6]), toint(h[2]), h[7] or '0'
  elseif paused ~= '1' and h[7] == '1' then
    call('SREM', held, T)
  end
  local asleep = false
  if hold > 0 and key ~= '' then
    holdKey(key, hold)
  elseif hold > 0 then
    local wake = now + hold
    if toint(call('ZSCORE', sleep, T)) < wake then
      call('ZADD', sleep, int(wake), T)
    end
    asleep = true
  end
  local twm = wm > 0 and wm or WEIGHT_SCALE
  local test = toint(h[3])
  test = test == 0 and ran or smooth(test, ran, TENANT_SMOOTHING)
  local tag = toint(h[1]) + charge(ran - est, twm)
  qest = qest == 0 and ran or smooth(qest, ran, QUEUE_SMOOTHING)
  local n = toint(h[5])
  local rollback = state == 'scheduled' and isParked(id)
  local leaves = rollback or (done and state ~= 'retry' and state ~= 'pending' and state ~= 'scheduled')
  if leaves then
    n = math.max(n - 1, 0)
    call('HDEL', run, id)
    if s == 'g' then
      call('HDEL', grants, id)
    elseif s == 'f' then
      call('ZREM', fresh, id)
    end
  else
    -- asynq will run it again: it keeps its place
    call('HSET', run, id, 'p|0|' .. since .. '|' .. T .. (f == '0' and '' or '\n' .. f))
    if s == 'g' then
      call('HDEL', grants, id)
    end
  end
  call('HSET', th, 'tag', int(tag), 'est', int(test), 'used', int(toint(h[4]) + ran), 'n', n,
    'cap', cap, 'wm', wm, 'paused', paused)
  if rollback then
    -- Redis came back from a snapshot taken before the task's move: asynq
    -- keeps it parked, so it goes back to the head of its tenant's line.
    push(T, f, '0|' .. nowS .. '|0|' .. id, true)
    h[9] = call('HGET', th, 'wk')
  end
  local waiting = waitingOf(T, h[9] or 0)
  place(T, tag, n, cap, paused, waiting, asleep or nil)
  if leaves then
    leaveKeys(f)
    -- settle, knowing the record
    if n > 0 or toint(h[8]) > 0 or waiting > 0 then
      persist(th, T)
    elseif tag <= floor then
      call('DEL', th)
      if owes() then
        call('ZREM', debts, T)
      end
      if paused == '1' then
        call('SREM', held, T)
      end
    else
      call('PEXPIRE', th, IDLE)
      call('ZADD', debts, nowS, T)
      owing = true
    end
  end
  return true
end

local a = 7
local later = {}
for i = 1, tonumber(ARGV[6]) do
  if not finish(ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2] == '1', tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]),
      ARGV[a + 5], tonumber(ARGV[a + 6]), ARGV[a + 7] or '') then
    later[#later + 1] = i
  end
  a = a + 8
end

local _
_, a = moveOps(a)
updates(a)
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
end
forgive()
save()
out[#out + 1] = call('ZCARD', vt) + call('ZCARD', sleep)
local due = 0
for _, k in ipairs({sleep, limbo, ksleep}) do
  local first = call('ZRANGE', k, 0, 0, 'WITHSCORES')
  if first[2] and (due == 0 or tonumber(first[2]) < due) then
    due = tonumber(first[2])
  end
end
out[#out + 1] = due
for _, i in ipairs(later) do
  out[#out + 1] = i
end
return out
