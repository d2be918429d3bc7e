#!lua
-- counter.lua: the approximate, O(1)-in-Limit mode of the slot rule, for
-- tenants whose quotas are too large to log every entry. After
-- counter_prelude.lua (the hash's fields), which package lua puts after
-- this line. The shebang without flags makes Redis refuse the call whole
-- when it is over maxmemory, never halfway.
--
-- KEYS[1]  the tenant's counters
-- ARGV[1]  limit
-- ARGV[2]  window µs
-- ARGV[3]  max delay µs
-- ARGV[4]  granularity µs (1 = none)
-- ARGV[5]  buckets per window
-- ARGV[6]  n > 0, the number of requests, decided in order
-- ARGV[7]  not-before time µs (0 = none): the requests start no earlier
-- Or, for several tenants in one call (a batch, on one Redis), ARGV
-- "batch" and then, for each key in order, its ARGV[1] to ARGV[7].
-- Returns  {now µs, then for each request: outcome, at µs, remaining;
--          then the retry hint µs}, as admit.lua: outcome 0 admitted,
--          1 deferred, 2 rejected; for a batch, now and then each key's
--          reply without its now.
--
-- A new slot is the first free one (see slotFrom) at or after the later of
-- now, the not-before time and the newest slot (FIFO); max delay is
-- compared with the rounded slot, from the later of now and the
-- not-before time. Once one request is rejected every later one is too.
--
-- Cost: a decision reads the buckets of one window, never those ahead,
-- so it does not grow with the backlog; when every slot is now it reads
-- the stored sum and the bucket that left the window since, in the one
-- HMGET of the key's fields, and writes in one HSET. A change of width
-- moves the MOVE newest buckets to the new width, each to the bucket of
-- its last moment (or of the newest slot, if sooner), and counts any
-- older ones a window can still reach as a full window at the moment the
-- moved ones start. Dead buckets go by a sweep of SWEEP fields (HSCAN),
-- started once per window of time: deletion never walks the whole hash.
local SWEEP = 64
local META = 8 -- the fields readMeta reads before the two buckets

local function readMeta(key, s)
  return call('HMGET', key, 'w', 'last', 'ws', 'wb', 'wn', 'c', 's', 'x', s.gone, s.now)
end

-- sweep deletes a chunk of buckets that no window from now on reaches,
-- and returns the new cursor.
local function sweep(key, cursor, widthS, oldest)
  local r = call('HSCAN', key, cursor, 'MATCH', '*:*', 'COUNT', SWEEP)
  local dead = {}
  for j = 1, #r[2], 2 do
    local f = r[2][j]
    local w, i = string.match(f, '^(%d+):(%-?%d+)$')
    if w and (w ~= widthS or tonumber(i) < oldest) then
      dead[#dead + 1] = f
    end
  end
  if #dead > 0 then
    call('HDEL', key, unpack(dead))
  end
  return r[1]
end

local function decide(key, a, meta)
  local limit, window, maxDelay = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local gran, n, start = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 6]), max(now, tonumber(ARGV[a + 7]))
  local s = shapeOf(ARGV[a + 2], ARGV[a + 5])
  local width, span, cur = s.width, s.span, s.cur
  meta = meta or readMeta(key, s)
  local stored, last = tonumber(meta[1]), tonumber(meta[2]) or now
  local ws, wb = meta[5] == s.spanS and tonumber(meta[3]), tonumber(meta[4])
  local counts, fast, moved = {}, nil, false
  local base = floor(max(start, last) / width) -- bucket of the first slot this call can give

  if stored and stored ~= width then
    change(key, counts, stored, width, window, last, limit)
    moved = true
  elseif stored then
    -- The sum serves when every slot is now and no bucket after wb holds
    -- any (none after the newest slot's does): wb is now's bucket, the one
    -- before (less the one that left), or more than a window ago.
    local sum = nil
    if start == now and last <= now and ws and wb and wb <= cur and floor(last / width) <= wb then
      if wb == cur then
        sum = ws
      elseif wb == cur - 1 then
        sum = ws - (tonumber(meta[META + 1]) or 0)
      elseif wb < cur - span then
        sum = 0
      end
    end
    if sum and sum + n < limit then
      fast = sum
      counts[cur] = tonumber(meta[META + 2]) or 0
    else
      read(key, width, counts, base - span, min(base, floor(last / width)))
    end
  end

  local out, retryAt, added = {now}, nil, {}
  if fast then
    for k = 1, n do
      out[3 * k - 1], out[3 * k], out[3 * k + 1] = 0, now, limit - fast - k
    end
    counts[cur], added[cur], last = counts[cur] + n, true, now
  end
  for _ = 1, fast and 0 or n do
    local code, slot, raw = 2, retryAt, nil
    if not retryAt then
      slot, raw = slotFrom(max(start, last), counts, limit, width, span, gran)
      if slot <= now then
        code = 0
      elseif slot - start <= maxDelay then
        code = 1
      else
        retryAt = min(raw, slot - maxDelay)
        slot = retryAt
      end
    end
    local remaining = 0
    if code ~= 2 then
      local b = floor(slot / width)
      counts[b], added[b], last = (counts[b] or 0) + 1, true, slot
      if code == 0 then
        remaining = max(0, limit - load(counts, span, b))
      end
    end
    out[#out + 1], out[#out + 2], out[#out + 3] = code, slot, remaining
  end
  -- The hint speaks of requests without a not-before time: a rejection
  -- with one may not hold for them, so ask afresh.
  local hint = 0
  if retryAt and start == now then
    hint = retryAt
  elseif not fast then
    local free, raw = slotFrom(max(now, last), counts, limit, width, span, gran)
    if free - now > maxDelay then
      hint = min(raw, free - maxDelay)
    end
  end
  out[#out + 1] = hint
  if not next(added) then
    return out -- a call that records nothing writes nothing
  end

  local set = {key, 'last', last == now and nowS or fmt(last), 'wb', base == cur and s.curS or fmt(base),
    'ws', fmt(fast and fast + n or load(counts, span, base))}
  if meta[5] ~= s.spanS then
    set[#set + 1], set[#set + 2] = 'wn', s.spanS
  end
  if stored ~= width then
    set[#set + 1], set[#set + 2] = 'w', s.widthS
  end
  local swept, cursor = tonumber(meta[7]), meta[6] or '0'
  if moved or not swept or cur < swept or (cursor == '0' and cur - swept > span) or (cursor ~= '0' and cur ~= swept) then
    set[#set + 1], set[#set + 2] = 'c', sweep(key, cursor, s.widthS, cur - span)
    set[#set + 1], set[#set + 2] = 's', s.curS
  end
  -- A bucket this call added to was read, or lies after every stored one:
  -- its count is known, so it is set, not incremented.
  for i in pairs(moved and counts or added) do
    if i >= cur - span and counts[i] > 0 then
      set[#set + 1], set[#set + 2] = i == cur and s.now or bucket(width, i), fmt(counts[i])
    end
  end
  -- The expiry goes on after the HSET that may create the key.
  local need, x = math.ceil((last + window + width) / 1000) + 1, nil -- ms
  if (tonumber(meta[8]) or -1) < need then
    x = fmt(need + floor(window / 8000))
    set[#set + 1], set[#set + 2] = 'x', x
  end
  call('HSET', unpack(set))
  if x then
    call('PEXPIREAT', key, x)
  end
  return out
end

if ARGV[1] ~= 'batch' then
  return decide(KEYS[1], 0)
end

-- Every key is read before any is written, so that a key of the wrong type
-- fails the call whole: a call failed halfway would have recorded entries
-- that a retry records again. A key that comes again is read at its turn.
local metas, seen = {}, {}
for k = 1, #KEYS do
  if not seen[KEYS[k]] then
    seen[KEYS[k]] = true
    local ok, meta = pcall(readMeta, KEYS[k], shapeOf(ARGV[k * 7 - 4], ARGV[k * 7 - 1]))
    if not ok then
      local ty = call('TYPE', KEYS[k]).ok
      if ty == 'hash' or ty == 'none' then
        error(meta)
      end
      return redis.error_reply('WRONGTYPE ' .. KEYS[k] .. ' holds a ' .. ty .. ', not a hash of counters')
    end
    metas[k] = meta
  end
end
local out = {now}
for k = 1, #KEYS do
  local r = decide(KEYS[k], 1 + 7 * (k - 1), metas[k])
  for i = 2, #r do
    out[#out + 1] = r[i]
  end
end
return out
