-- release.lua: gives back a task's permit and hands free permits to the
-- tenant's oldest parked tasks, applying the slot rule as it does. Runs
-- after slot.lua (see package lua).
--
-- KEYS[1]  the tenant's log: a ZSET of entry ID -> slot µs (admit.lua's)
-- KEYS[2]  permits: a ZSET of task ref -> lease expiry µs
-- KEYS[3]  parked: a ZSET of task ref -> park order
-- KEYS[4]  due: a ZSET of task ref -> slot µs, for tasks handed a permit
--          that the worker has still to move into the queue
-- KEYS[5]  not-before: a HASH of parked task ref -> not-before µs
--          (permit.lua's)
-- ARGV     limit, window µs, granularity µs, cap (0 = none), lease µs,
--          the ref of a task that is gone, to drop from permits, due and
--          parked ("" for none), most grants to make,
--          scan (1: also list lapsed permits and due tasks, at most 64 each),
--          due grace µs (a grant is listed as due once its slot is this far
--          behind: until then the worker that made it is moving it)
-- Returns  {now µs, permits held, tasks parked, order of the oldest parked
--          task (0 when none), grants: n, then n triples ref, slot µs,
--          park order; when scan: lapsed: n then n refs whose lease is
--          over; due: n then n pairs ref, slot µs whose slot has come}
--
-- A granted task's slot is max(now, its not-before time, newest slot,
-- L-th newest + window), rounded up to the granularity when it is ahead of
-- now: the slot rule, with no MaxDelay, since a parked task was accepted
-- already. A ref whose entry ID is in the log already (a retried grant)
-- keeps its slot. A task granted a slot ahead of now holds its permit
-- from now on, so the tasks parked behind it wait for it (FIFO).
local log, permits, parked, due, notBefore = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local limit, window, gran = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local cap, lease, ref, most, scan = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]), ARGV[8] == '1'
local dueGrace = tonumber(ARGV[9])

if ref ~= '' then -- the task is gone, wherever it was
  call('ZREM', permits, ref)
  call('ZREM', due, ref)
  call('ZREM', parked, ref)
  call('HDEL', notBefore, ref)
end
local held = call('ZCARD', permits)
local waiting = call('ZCARD', parked)

local grants = {}
if waiting > 0 and (cap == 0 or held < cap) then
  -- The most entries this call can record: a trim every TRIM entries
  -- (slot.lua) counts on it.
  local grantable = min(most, waiting)
  if cap > 0 then
    grantable = min(grantable, cap - held)
  end
  local card = slotTrim(log, window, limit, grantable)
  local newest, expiry = slotNewest(log, card)
  local added = false
  local timed = call('EXISTS', notBefore) == 1
  while waiting > 0 and (cap == 0 or held < cap) and #grants < 3 * most do
    local head = call('ZRANGE', parked, 0, 0, 'WITHSCORES')
    local r, order = head[1], tonumber(head[2])
    call('ZREM', parked, r)
    -- The entry ID is what follows "<len>:<queue>".
    local colon = string.find(r, ':', 1, true)
    local id = string.sub(r, colon + 1 + tonumber(string.sub(r, 1, colon - 1)))
    local nb = 0
    if timed then
      nb = tonumber(call('HGET', notBefore, r) or 0)
      if nb > 0 then
        call('HDEL', notBefore, r)
      end
    end
    local s = call('ZSCORE', log, id)
    local slot
    if s then
      slot = tonumber(s)
    else
      local raw = max(slotRaw(log, limit, window, card, newest), nb)
      slot = now
      if raw > now then
        slot = ceil(raw, gran)
      end
      call('ZADD', log, slot == now and nowS or slot, id)
      card, newest, added = card + 1, max(newest, slot), true
    end
    call('ZADD', permits, max(slot, now) + lease, r)
    call('ZADD', due, slot, r)
    grants[#grants + 1], grants[#grants + 2], grants[#grants + 3] = r, slot, order
    held, waiting = held + 1, waiting - 1
  end
  if added then
    slotExpire(log, window, newest, expiry)
  end
end

local oldest = 0
if waiting > 0 then
  oldest = tonumber(call('ZRANGE', parked, 0, 0, 'WITHSCORES')[2])
end
local out = {now, held, waiting, oldest, #grants / 3}
for i = 1, #grants do
  out[#out + 1] = grants[i]
end
if scan then
  local lapsed = call('ZRANGE', permits, '-inf', '(' .. nowS, 'BYSCORE', 'LIMIT', 0, 64)
  out[#out + 1] = #lapsed
  for i = 1, #lapsed do
    out[#out + 1] = lapsed[i]
  end
  local ready = call('ZRANGE', due, '-inf', string.format('%.0f', now - dueGrace), 'BYSCORE', 'LIMIT', 0, 64, 'WITHSCORES')
  out[#out + 1] = #ready / 2
  for i = 1, #ready, 2 do
    out[#out + 1], out[#out + 2] = ready[i], tonumber(ready[i + 1])
  end
end
return out
