-- slot.lua: the slot rule of admit.lua for one request at a time, as a
-- fragment, not a script: package lua puts it ahead of permit.lua and
-- release.lua at build time, so that the capped scripts share one copy.
-- admit.lua keeps its own, tuned for batches; a model test holds the two
-- to the same decisions (admission/permit_model_test.go).
--
-- It defines, for the scripts that follow it:
--   call, max, min, now (Redis time, µs), nowS (now formatted exactly)
--   ceil(x, g)                     x rounded up to a multiple of g
--   slotTrim(key, window, limit, n[, card])
--                                  the log's count (card, when the caller
--                                  has counted it already), trimmed first as
--                                  admit.lua trims, for a call that may
--                                  record up to n entries: once every TRIM
--                                  entries, or near the limit, so the count
--                                  may hold entries that left the window
--                                  but is exact wherever it decides
--   slotNewest(key, card)          the newest slot in the log, at least now,
--                                  and the log's expiry (ms, PEXPIRETIME's)
--   slotRaw(key, limit, window, card, newest)
--                                  the next free slot before rounding
--   slotExpire(key, window, newest, expiry)
--                                  sets the log's expiry, as admit.lua does:
--                                  past newest + window, and odd while a
--                                  slot lies ahead, even otherwise. admit.lua
--                                  reads that parity to learn whether a
--                                  reservation lies ahead, and it reads the
--                                  logs these scripts wrote once a tenant's
--                                  MaxInFlight is removed. These scripts
--                                  read it too (slotNewest), and so make a
--                                  ZCOUNT only when a slot may lie ahead.
local call, max, min = redis.call, math.max, math.min
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nowS = string.format('%.0f', now)

local function ceil(x, g)
  local r = math.fmod(x, g)
  if r > 0 then
    return x - r + g
  end
  return x
end

local TRIM = 8 -- admit.lua's

local function slotTrim(key, window, limit, n, card)
  card = card or call('ZCARD', key)
  if card > 0 and (card % TRIM + n >= TRIM or card + n + TRIM > limit) then
    card = card - call('ZREMRANGEBYSCORE', key, '-inf', string.format('%.0f', now - window))
  end
  return card
end

local function slotNewest(key, card)
  if card == 0 then
    return now, -2
  end
  local expiry = call('PEXPIRETIME', key)
  if (expiry < 0 or expiry % 2 == 1) and call('ZCOUNT', key, '(' .. nowS, '+inf') > 0 then
    return tonumber(call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]), expiry
  end
  return now, expiry
end

local function slotRaw(key, limit, window, card, newest)
  local slot = newest
  if card >= limit then
    local e = call('ZRANGE', key, -limit, -limit, 'WITHSCORES')
    slot = max(slot, tonumber(e[2]) + window)
  end
  return slot
end

local function slotExpire(key, window, newest, expiry)
  local need = math.ceil((newest + window) / 1000) + 1
  local odd = newest > now and 1 or 0
  if expiry < need or expiry % 2 ~= odd then
    local at = max(expiry, need + math.floor(window / 8000))
    if at % 2 ~= odd then
      at = at + 1
    end
    call('PEXPIREAT', key, string.format('%.0f', at))
  end
end
