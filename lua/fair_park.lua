-- fair_park.lua: a producer's task in a dispatched queue: it goes straight
-- in, waits its turn, or finds the tenant's waiting backlog full. Runs
-- after fair.lua (KEYS and the first two ARGV are its).
--
-- ARGV[3]  tenant
-- ARGV[4]  task ID
-- ARGV[5]  not-before µs (0 for none)
-- ARGV[6]  the task's asynq.Unique TTL in ms (0 for none)
-- ARGV[7]  the tenant's MaxInFlight (0: no cap)
-- ARGV[8]  the tenant's MaxParked
-- ARGV[9]  the tenant's weight in thousandths (> 0)
-- ARGV[10] the tenant's Paused: 1 or 0
-- ARGV[11] the task's asynq.Deadline µs (0 for none)
-- ARGV[12] the task's flow (package rule's FlowID: its priority and keys)
-- ARGV[13] newID: 1 when the ID was made for this call alone (Enqueue's
--          own), else 0. Its task is not written before its park, so it
--          cannot be parked yet, and the look for it among the parked
--          tasks is skipped; it may be in run already, or written by this
--          park (a park resent by the client after a lost reply), so those
--          looks stay
-- ARGV[14] k, then k triples: each key of the flow, in its order, with its
--          MaxInFlight and paused (1 or 0) as its quota says now
-- ARGV[15 + 3k] (optional) the task's message, as asynq encodes it: a
--          task that waits is then written parked here, as asynq's
--          schedule script writes it, in the same call as its entry
-- Returns  {verdict, now µs, tasks the tenant has waiting}, verdict:
--          "wait": the entry is stored, the caller writes the task parked
--          "written": given its message, the entry is stored and the task
--            written parked
--          "exists": given a message, asynq holds a task with the ID
--            already (a retry whose first call wrote it, or another task):
--            nothing is stored or written
--          "in": granted (state f), the caller admits and writes it
--          "full": nothing of the task stored, the backlog is at MaxParked
--          "direct": no worker with a gate served the queue within
--            RESTART_GRACE (or none is fair and the tenant has no cap and
--            is not paused): nothing of the task stored
--          "in-again": the ID is in run already (a retry), nothing
--            changes; the caller admits and writes it, and gives nothing
--            back
--          "wait-again": asynq keeps the ID parked already (a retry of a
--            task that waits), nothing changes; the caller's write finds
--            it there
--
-- A task goes straight in only when nothing its tenant has waiting could
-- go (none waits, or every flow waits on a closed key), it is under its
-- cap and awake, every key it carries is open, no tenant waits with an
-- earlier start tag, and the queue has space: then nothing waiting could
-- have gone first. A task
-- that must not start for more than a second (its own ProcessAt) waits in
-- limbo until then, holding no place and no one back, and then goes to the
-- head of its tenant's line.
local T, id, nb, uttl = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local cap, maxParked, wm, paused = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
local f, newID, nk = ARGV[12], ARGV[13] == '1', tonumber(ARGV[14])
local msg = ARGV[15 + 3 * nk]

-- A park resent after a lost reply finds the task it wrote, even if the
-- queue has gone direct since.
if msg and call('EXISTS', TP .. id) == 1 then
  return {'exists', now, 0}
end
local recent, fair, total = capacity()
if not recent or (not fair and cap == 0 and paused ~= '1' and nk == 0) then
  return {'direct', now, 0}
end
if call('HEXISTS', run, id) == 1 then
  return {'in-again', now, 0}
end
if not newID and isParked(id) then
  return {'wait-again', now, 0}
end
local th = P .. 't:' .. T
local h = call('HMGET', th, 'tag', 'n', 'cap', 'wm', 'paused', 'wk', 'est', 'lg')
local changed = toint(h[3]) ~= cap or toint(h[4]) ~= wm or (h[5] or '0') ~= paused
if changed then
  call('HSET', th, 'cap', cap, 'wm', wm, 'paused', paused)
  if paused ~= '1' then
    call('SREM', held, T)
  end
end
for i = 1, nk do
  local a = 12 + 3 * i
  keyLimits(ARGV[a], ARGV[a + 1], ARGV[a + 2], true)
end
local waiting = waitingOf(T, h[6] or 0)
local later = tonumber(nb) > now + 1000000
local tag, n = toint(h[1]), toint(h[2])
local lend = lent(cap, n, toint(h[8]), toint(h[7]), wm)
local start = startAt(tag, lend)
-- anyOpen reports whether a flow of T with tasks waiting is open (flow
-- "0" always is; a tenant without wk has no other).
local function anyOpen()
  if call('LLEN', P .. 'w:' .. T) > 0 then
    return true
  end
  for _, g in ipairs(flowsOf(T)) do
    if flowOpen(g) then
      return true
    end
  end
  return false
end
if not later and paused ~= '1' and (cap == 0 or n < cap) and (waiting == 0 or (h[6] and not anyOpen()))
    and not call('ZSCORE', sleep, T) and flowOpen(f) then
  seen()
  local head = call('ZRANGE', vt, 0, 0, 'WITHSCORES')
  if (#head == 0 or start <= tonumber(head[2])) and room(fair, total) > 0 then
    grant(T, id, nil, start, nil, f)
    if tonumber(ARGV[11]) > 0 then
      call('HSET', deadlines, id, ARGV[11]) -- overdue in asynq's retry set, it frees its place
    elseif not newID then
      call('HDEL', deadlines, id) -- an earlier task's of the ID
    end
    if waiting > 0 then
      refresh(T) -- its waiting tasks wait on keys: at its new tag
    end
    save()
    return {'in', now, 0}
  end
end
if waiting >= maxParked then
  settle(T)
  for _, K in ipairs(flowKeys(f)) do
    settleKey(K)
  end
  return {'full', now, waiting}
end
local e = nb .. '|' .. nowS .. '|' .. uttl .. '|' .. id
-- A tenant with tasks waiting in flow "0" only, and limits as they were,
-- keeps its record and its place among those that may go in as they are
-- when one more joins them.
local same = waiting > 0 and f == '0' and not h[6] and not changed
if not same then
  persist(th, T)
end
if tonumber(ARGV[11]) > 0 then
  call('HSET', deadlines, id, ARGV[11])
elseif not newID then
  call('HDEL', deadlines, id) -- an earlier task's of the ID
end
if not newID then
  owned(id, e) -- the latest entry of the caller's ID (see own)
end
local verdict = 'wait'
if msg then
  call('HSET', TP .. id, 'msg', msg, 'state', 'scheduled')
  call('ZADD', scheduled, PARKED, id)
  verdict = 'written'
end
if later then
  toLimbo(T, e, tonumber(nb), f)
  for _, K in ipairs(flowKeys(f)) do
    settleKey(K)
  end
  return {verdict, now, waiting}
end
push(T, f, e, false)
if not same then
  place(T, tag, n, cap, paused, waiting + 1, nil, lend)
end
return {verdict, now, waiting + 1}
