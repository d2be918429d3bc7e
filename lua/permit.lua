-- permit.lua: the slot rule and the in-flight cap together, for one tenant
-- whose quota has MaxInFlight > 0. Runs after slot.lua (see package lua).
--
-- KEYS[1]  the tenant's log: a ZSET of entry ID -> slot µs (admit.lua's)
-- KEYS[2]  permits: a ZSET of task ref -> lease expiry µs
-- KEYS[3]  parked: a ZSET of task ref -> park order (≈ park time µs)
-- KEYS[4]  not-before: a HASH of parked task ref -> not-before µs, for
--          parked tasks that must not start before a time of their own
-- ARGV     limit, window µs, max delay µs, granularity µs, cap (>= 1),
--          max parked, lease µs, not-before µs (0 for none), n, then n
--          pairs: entry ID, task ref
--          (a ref is "<len(queue)>:<queue><ID>", see admission.Ref)
-- Returns  {now µs, new (1 when the tenant held no permit and parked
--          nothing before this call), then for each pair in order:
--          outcome, at µs, remaining}
--          outcome 0 admitted, 1 deferred, 2 rejected (rate), 3 admitted
--                  earlier, 4 deferred earlier, 5 parked, 6 parked earlier,
--                  7 rejected: the parked backlog is full
--          at: the slot (0-4), the park time (5, 6), the earliest useful
--          retry (2, 7)
--
-- A request takes a permit when the tenant holds fewer than cap and has
-- nothing parked (parked tasks go first: FIFO), then gets a slot by the
-- slot rule; one that finds no permit is parked, in order, with no slot:
-- release.lua applies the slot rule when it hands the parked task a permit,
-- and keeps it from starting before its not-before time, kept here.
-- Once one request is rejected by the rate, so is every later one of the
-- call, as in admit.lua.
local log, permits, parked, notBefore = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local limit, window, maxDelay, gran = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cap, maxParked, lease = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
-- start: the later of now and the not-before time, as in admit.lua: work
-- is charged for when it will first run, and MaxDelay counts from there.
local start, n = max(now, tonumber(ARGV[8])), tonumber(ARGV[9])

local held = call('ZCARD', permits)
local waiting = call('ZCARD', parked)
local out = {now, (held == 0 and waiting == 0) and 1 or 0}

local card = slotTrim(log, window, limit, n)
local newest, expiry = slotNewest(log, card)
local added = false
local rejectedAt = nil
-- Park order: after the newest parked task, so that a call whose TIME is
-- behind an earlier batch's last order still parks behind it.
local order = now
if waiting > 0 then
  order = max(now, tonumber(call('ZRANGE', parked, -1, -1, 'WITHSCORES')[2]) + 1)
end

-- existing returns the outcome of a ref that already holds a permit:
-- its slot, from the log.
local function existing(id)
  local s = call('ZSCORE', log, id)
  local at = s and tonumber(s) or now
  return at > now and 4 or 3, at
end

-- The common path (a permit free, the slot rule admits) checks for a
-- retried ref with the ZADD NX that takes the permit; the other paths
-- look it up.
for i = 10, 9 + 2 * n, 2 do
  local id, ref = ARGV[i], ARGV[i + 1]
  local code, at, remaining = 2, 0, 0
  if waiting == 0 and held < cap and not rejectedAt then
    local raw = max(slotRaw(log, limit, window, card, newest), start)
    local slot = now
    if raw > now then
      slot = ceil(raw, gran)
    end
    if slot - start > maxDelay then
      if call('ZSCORE', permits, ref) then
        code, at = existing(id)
      else
        rejectedAt = min(raw, slot - maxDelay)
        code, at = 2, rejectedAt
      end
    elseif call('ZADD', permits, 'NX', slot + lease, ref) == 0 then
      code, at = existing(id)
    else
      call('ZADD', log, slot == now and nowS or slot, id)
      card, newest, added, held = card + 1, max(newest, slot), true, held + 1
      code, at = slot > now and 1 or 0, slot
      if slot == now and card < limit then
        remaining = limit - card
      end
    end
  elseif call('ZSCORE', permits, ref) then
    code, at = existing(id)
  elseif rejectedAt and waiting == 0 and held < cap then
    code, at = 2, rejectedAt
  elseif waiting < maxParked then
    if call('ZADD', parked, 'NX', order, ref) == 1 then
      if start > now then
        call('HSET', notBefore, ref, string.format('%.0f', start))
      end
      code, at = 5, now
      waiting, order = waiting + 1, order + 1
    else
      code, at = 6, tonumber(call('ZSCORE', parked, ref))
    end
  else
    local s = call('ZSCORE', parked, ref)
    if s then
      code, at = 6, tonumber(s)
    else
      code, at = 7, now + window
    end
  end
  out[#out + 1], out[#out + 2], out[#out + 3] = code, at, remaining
end

if added then
  slotExpire(log, window, newest, expiry)
end
return out
