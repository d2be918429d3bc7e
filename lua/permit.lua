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
-- Or, for several tenants in one call (a batch), ARGV "batch" and then,
-- for each tenant in order, its four KEYS and its ARGV above; the reply is
-- {now µs, then each tenant's reply without its now}. Every tenant's
-- sorted sets are counted (and a not-before hash that will be written is
-- read) before any is written, so a key of the wrong type fails the call
-- whole.
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

-- decide decides one tenant's tasks, with its keys from KEYS[k + 1] and its
-- ARGV from ARGV[a + 1] on, appending its reply (without now) to out. pre,
-- when the batch counted the tenant's sets first, holds those counts.
local function decide(k, a, out, pre)
  local log, permits, parked, notBefore = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local limit, window, maxDelay, gran = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local cap, maxParked, lease = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  -- start: the later of now and the not-before time, as in admit.lua: work
  -- is charged for when it will first run, and MaxDelay counts from there.
  local start, n = max(now, tonumber(ARGV[a + 8])), tonumber(ARGV[a + 9])

  local held, waiting, card
  if pre then
    held, waiting, card = pre[1], pre[2], pre[3]
  else
    held, waiting, card = call('ZCARD', permits), call('ZCARD', parked), call('ZCARD', log)
  end
  out[#out + 1] = (held == 0 and waiting == 0) and 1 or 0

  card = slotTrim(log, window, limit, n, card)
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
  for i = a + 10, a + 9 + 2 * n, 2 do
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
end

if ARGV[1] ~= 'batch' then
  local out = {now}
  decide(0, 0, out)
  return out
end

-- A batch. Count every tenant's sets first (a tenant that comes again is
-- counted again at its turn, after the writes before it), and read each
-- not-before hash that a task may be parked in, at every turn that may:
-- a key of the wrong type fails the call here, before anything is written.
local pres, seen = {}, {}
local a = 1
for k = 0, #KEYS - 1, 4 do
  if not seen[KEYS[k + 1]] then
    seen[KEYS[k + 1]] = true
    pres[k] = {call('ZCARD', KEYS[k + 2]), call('ZCARD', KEYS[k + 3]), call('ZCARD', KEYS[k + 1])}
  end
  if tonumber(ARGV[a + 8]) > now then
    call('HLEN', KEYS[k + 4])
  end
  a = a + 9 + 2 * tonumber(ARGV[a + 9])
end
local out = {now}
a = 1
for k = 0, #KEYS - 1, 4 do
  decide(k, a, out, pres[k])
  a = a + 9 + 2 * tonumber(ARGV[a + 9])
end
return out
