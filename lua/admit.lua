#!lua flags=allow-cross-slot-keys
-- admit.lua: the slot rule, for one or more tenants' sliding-window logs.
--
-- Flags    the first line declares the script (Redis 7), without allow-oom:
--          while Redis is over maxmemory it refuses the call whole with OOM,
--          where a script without flags would trim (a deletion, which Redis
--          allows) and then record its entries past maxmemory. With
--          allow-cross-slot-keys, a call on a Redis Cluster node may reach
--          the logs of every slot the node serves (below).
-- KEYS[k]  the log of the k-th tenant: a ZSET of entry ID -> slot (Redis time, µs)
--          On a Redis Cluster, where declared keys must share a slot, a
--          call for the tenants of one node declares only the first log
--          and names them all in ARGV. It must reach the node without
--          ASKING (follow no ASK redirect): under ASKING the node serves
--          every key of a slot it is importing, moved yet or not.
-- ARGV     optionally "logs", m, then the m logs in KEYS' place; then
--          nq, then nq quotas of four numbers each: limit, window µs,
--          max delay µs, granularity µs (1 = none); then for each key k, in
--          order: the index (1..nq) of its quota, the key's not-before time
--          µs (0 = none), n, then n entry IDs in request order. Most calls
--          carry one quota for many keys.
-- Returns  {now µs, then for each key: for each of its IDs in order
--          outcome, at µs, remaining; then the key's retry hint µs}
--          outcome 0 admitted, 1 deferred, 2 rejected,
--                  3 admitted earlier (ID already in the log), 4 deferred earlier.
--          at is the slot; for a rejection, the earliest time a retry could be
--          admitted or deferred.
--          The retry hint is 0, or the time until which any new request for
--          the key without a not-before time will be rejected: callers may
--          answer those without Redis. (A key rejected with a not-before
--          time has its slot pushed by the log, not by the not-before time,
--          so one without would be rejected too, with the same hint.)
--
-- A new slot is max(start, newest slot, L-th newest slot + window), where
-- start is the later of now and the key's not-before time (work that will not
-- run before then is charged for when it runs): every interval of length
-- window then holds at most limit slots, and slots never go backwards (FIFO),
-- even when deferred slots are rounded up to the granularity.
-- MaxDelay is compared with the rounded slot, from start, so no request is
-- ever deferred further than max delay past its not-before time, and
-- requests that share a rounded slot are judged on the same slot.
-- Once one ID of a key is rejected, every later ID of that key is too.
--
-- Cost. Each redis.call has a fixed cost, so the common path (a log with
-- room and no reservation ahead) makes three per group: ZCARD,
-- PEXPIRETIME and ZADD.
--   * The trim (ZREMRANGEBYSCORE) runs once every TRIM entries, or when the
--     log nears its limit, not on every call: a count that still holds
--     entries that have left the window only overstates the log, and it
--     is exact whenever it could matter, so the decisions are those of a
--     log trimmed every time. Remaining is then a lower bound when it is TRIM
--     or more, and exact below (where the deny cache paces a tenant).
-- The log's expiry says what else is needed:
--   * its parity says whether a reservation may lie ahead: every call that
--     leaves a slot after now sets an odd expiry, and one that leaves none
--     may set an even one. Only an odd (or missing) expiry costs a ZCOUNT;
--   * it is set a little (window / 8) past newest slot + window, so the
--     PEXPIREAT that moves it is needed about once in that time, not on
--     every admission. It never moves back.
-- A key whose expiry someone else set (PERSIST, EXPIRE) may hold a
-- reservation under an even expiry.
--
-- Numbers passed to redis.call are converted exactly: Redis formats them
-- with enough digits for a 16-digit µs timestamp, at a cost; the bounds
-- every key of a quota shares are formatted once a call, with %.0f (Lua's
-- own tostring would not be exact).
local call, max, min = redis.call, math.max, math.min
local TRIM = 8 -- the deny cache's nearFull: Remaining below it is exact
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- ceil rounds x up to a multiple of g; fmod is exact, unlike x / g.
local function ceil(x, g)
  local r = math.fmod(x, g)
  if r > 0 then
    return x - r + g
  end
  return x
end

-- lth returns the L-th newest slot of the log of the group being decided,
-- which holds card entries. A rejection and the retry hint after it both
-- need it, and reading a score is dear (Redis formats the double), so it
-- is read once per count. Within a group only ZADD changes the log, and it
-- moves the count; each group starts afresh (lthCard = nil), since another
-- group of the same tenant can trim and refill its log to the same count.
local lthCard, lthSlot
local function lth(key, limit, card)
  if card ~= lthCard then
    local e = call('ZRANGE', key, -limit, -limit, 'WITHSCORES')
    lthCard, lthSlot = card, tonumber(e[2])
  end
  return lthSlot
end

local logs, a = KEYS, 1
if ARGV[1] == 'logs' then
  logs = {}
  for k = 1, tonumber(ARGV[2]) do
    logs[k] = ARGV[2 + k]
  end
  a = 3 + #logs
end
local nq = tonumber(ARGV[a])
local quotas = {}
a = a + 1
for i = 1, nq do
  local window = tonumber(ARGV[a + 1])
  quotas[i] = {
    limit = tonumber(ARGV[a]), window = window,
    maxDelay = tonumber(ARGV[a + 2]), gran = tonumber(ARGV[a + 3]),
    trim = string.format('%.0f', now - window), -- ZREMRANGEBYSCORE's max
    slack = math.floor(window / 8000), -- ms the expiry may run past the minimum
  }
  a = a + 4
end
local nowS = string.format('%.0f', now)
local future = '(' .. nowS

local out, o = {now}, 1

-- Count every log first: a key of the wrong type, or a log this cluster
-- node does not serve, fails the script here, before any key is written,
-- so a failed call never leaves half a batch.
local cards = {}
for k = 1, #logs do
  cards[k] = call('ZCARD', logs[k])
end
local seen = {}

for k = 1, #logs do
  local key = logs[k]
  local quota = quotas[tonumber(ARGV[a])]
  local limit, window, maxDelay, gran = quota.limit, quota.window, quota.maxDelay, quota.gran
  local start = tonumber(ARGV[a + 1])
  if start < now then -- no not-before time, or one that has passed
    start = now
  end
  local n = tonumber(ARGV[a + 2])
  a = a + 3

  local card = cards[k]
  if seen[key] then -- a second group of one tenant: count it anew
    card = call('ZCARD', key)
  end
  seen[key] = true
  lthCard = nil
  -- Trim when this group takes the count past a multiple of TRIM, or
  -- could take it near the limit. In between, a log holds entries that
  -- have left the window only since its last trim, fewer than TRIM entries
  -- ago; and since the count that includes them stays below
  -- limit - TRIM, every ID finds room as it would in a trimmed log.
  if card > 0 and (card % TRIM + n >= TRIM or card + n + TRIM > limit) then
    card = card - call('ZREMRANGEBYSCORE', key, '-inf', quota.trim)
  end
  -- The key's expiry ms: -2 when the key is new (or emptied and gone), -1
  -- when it has none.
  local expiry = -2
  local newest = now
  if card > 0 then
    expiry = call('PEXPIRETIME', key)
    -- Only an odd (or no) expiry says a slot may lie after now; then ZCOUNT
    -- answers with a number, cheaper than reading the newest entry. (It
    -- need not be the L-th newest + window: rounding, by this gate or
    -- another one on the same tenant, can put it beyond.)
    if (expiry < 0 or expiry % 2 == 1) and call('ZCOUNT', key, future, '+inf') > 0 then
      local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
      newest = tonumber(last[2])
    end
  end
  local added = false
  local retryAt = nil

  for i = a, a + n - 1 do
    local id = ARGV[i]
    local code, slot, raw = 2, retryAt, nil
    if not retryAt then
      slot = max(newest, start)
      if card >= limit then
        slot = max(slot, lth(key, limit, card) + window)
      end
      if slot <= now then
        code = 0
      else
        raw = slot
        slot = ceil(slot, gran)
        if slot - start <= maxDelay then
          code = 1
        end
      end
    end
    if code == 2 then
      -- A retry of an ID that already holds a slot keeps it, even when full.
      local s = call('ZSCORE', key, id)
      if s then
        slot = tonumber(s)
        code = 3
      elseif not retryAt then
        -- A retry is admitted from raw on, or deferred from slot - maxDelay.
        retryAt = min(raw, slot - maxDelay)
        slot = retryAt
      end
    elseif call('ZADD', key, 'NX', slot == now and nowS or slot, id) == 1 then
      card = card + 1
      newest = slot
      added = true
    else
      slot = tonumber(call('ZSCORE', key, id))
      code = 3
    end
    if code == 3 and slot > now then
      code = 4
    end
    local remaining = 0
    if code ~= 2 and newest <= now and card < limit then
      remaining = limit - card
    end
    out[o + 1], out[o + 2], out[o + 3] = code, slot, remaining
    o = o + 3
  end
  a = a + n

  local hint = retryAt or 0
  if not retryAt then
    local free = newest
    if card >= limit then
      free = max(free, lth(key, limit, card) + window)
    end
    local rounded = ceil(free, gran)
    if free > now and rounded - now > maxDelay then
      hint = min(free, rounded - maxDelay)
    end
  end
  o = o + 1
  out[o] = hint

  if added then
    -- The expiry must be past newest slot + window (need, ms), odd when
    -- that slot lies ahead, and never earlier than it was: a Release may
    -- have freed a slot before a reservation that must outlive it.
    local need = math.ceil((newest + window) / 1000) + 1
    local odd = newest > now and 1 or 0
    if expiry < need or expiry % 2 ~= odd then
      local at = max(expiry, need + quota.slack)
      if at % 2 ~= odd then
        at = at + 1
      end
      call('PEXPIREAT', key, string.format('%.0f', at))
    end
  end
end
return out
