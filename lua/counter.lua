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

-- The fields every decision reads, in one HMGET: "w" is "<width>:<span>",
-- so that a window of the same width but another span (whose sum would
-- cover other buckets) reads as a change.
local function readMeta(key, s)
  return call('HMGET', key, 'w', 'last', 'ws', 'wb', 'c', 's', 'x', s.gone, s.now)
end

-- sweep deletes a chunk of buckets that no window from now on reaches,
-- and returns the new cursor.
local function sweep(key, cursor, widthS, oldest)
  local r = call('HSCAN', key, cursor, 'MATCH', '*:*', 'COUNT', SWEEP)
  local dead = {}
  for j = 1, #r[2], 2 do
    local w, i = string.match(r[2][j], '^(%d+):(%-?%d+)$')
    if w and (w ~= widthS or tonumber(i) < oldest) then
      dead[#dead + 1] = r[2][j]
    end
  end
  if #dead > 0 then
    call('HDEL', key, unpack(dead))
  end
  return r[1]
end

-- sweepDue says whether a sweep is due: once per window of time, and once
-- per bucket of time while one is under way.
local function sweepDue(meta, s)
  local swept, cursor = tonumber(meta[6]), meta[5] or '0'
  return not swept or s.cur < swept or (cursor == '0' and s.cur - swept > s.span) or (cursor ~= '0' and s.cur ~= swept)
end

-- expiryDue says whether the key's expiry falls short of newest's window.
local function expiryDue(meta, s, window, newest)
  return (tonumber(meta[7]) or -1) < math.ceil((newest + window + s.width) / 1000) + 1
end

-- write sets the fields in set, with the sweep and the expiry when they
-- are due; the expiry goes on after the HSET that may create the key.
local function write(key, set, meta, s, window, maxDelay, newest)
  if sweepDue(meta, s) then
    set[#set + 1], set[#set + 2] = 'c', sweep(key, meta[5] or '0', s.widthS, s.cur - s.span)
    set[#set + 1], set[#set + 2] = 's', s.curS
  end
  local x = nil
  if expiryDue(meta, s, window, newest) then
    -- A window to spare, or an eighth of max delay, so that a backlog that
    -- moves the newest slot a window a call moves the expiry seldom.
    x = fmt(math.ceil((newest + window + max(window, floor(maxDelay / 8)) + s.width) / 1000) + 1) -- ms
    set[#set + 1], set[#set + 2] = 'x', x
  end
  call('HSET', unpack(set))
  if x then
    call('PEXPIREAT', key, x)
  end
end

-- decide appends to out the replies to the requests of key, whose ARGV
-- start after a, and whose fields are meta when a batch read them.
local function decide(out, key, a, meta)
  local limit, window, maxDelay = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local gran, n, start = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 6]), max(now, tonumber(ARGV[a + 7]))
  local s = shapeOf(ARGV[a + 2], ARGV[a + 5])
  local width, span, cur = s.width, s.span, s.cur
  meta = meta or readMeta(key, s)
  local ours, last = meta[1] == s.shape, tonumber(meta[2]) or now

  -- Every slot is now, and the sum serves: no bucket after wb holds any
  -- (a call that gave a slot ahead left last there), and wb is now's
  -- bucket, the one before (less the one that left since), or more than a
  -- window ago. "last" is left as it is: it is at most now.
  local ws, wb = tonumber(meta[3]), tonumber(meta[4])
  if ours and start == now and last <= now and ws and wb and wb <= cur and floor(last / width) <= wb then
    local sum = nil
    if wb == cur then
      sum = ws
    elseif wb == cur - 1 then
      sum = ws - (tonumber(meta[8]) or 0)
    elseif wb < cur - span then
      sum = 0
    end
    if sum and sum + n < limit then
      for k = 1, n do
        out[#out + 1], out[#out + 2], out[#out + 3] = 0, now, limit - sum - k
      end
      out[#out + 1] = 0 -- the hint: the window has room
      local c = (wb == cur and tonumber(meta[9]) or 0) + n
      if sweepDue(meta, s) or expiryDue(meta, s, window, now) then
        write(key, {key, s.now, fmt(c), 'ws', fmt(sum + n), 'wb', s.curS}, meta, s, window, maxDelay, now)
      else
        call('HSET', key, s.now, fmt(c), 'ws', fmt(sum + n), 'wb', s.curS)
      end
      return
    end
  end

  local counts, stored = {}, meta[1] and tonumber(string.match(meta[1], '^%d+'))
  if stored and not ours then
    change(key, counts, stored, width, window, max(last, now), limit)
  elseif stored then
    -- The buckets a window ending at the first slot this call can give
    -- reaches; every later slot reaches fewer, and none lies after it.
    local base = floor(max(start, last) / width)
    read(key, width, counts, base - span, min(base, max(cur, floor(last / width))))
  end
  local retryAt, added = nil, {}
  for _ = 1, n do
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
      counts[b], added[b], last = (counts[b] or 0) + 1, true, max(last, slot)
      if code == 0 then
        remaining = max(0, limit - load(counts, span, b))
      end
    end
    out[#out + 1], out[#out + 2], out[#out + 3] = code, slot, remaining
  end
  -- The hint speaks of requests without a not-before time: a rejection
  -- with one may not hold for them, so ask afresh.
  local hint = retryAt
  if not retryAt and max(now, last) + window + 2 * width + gran - now <= maxDelay then
    hint = 0 -- the next free slot is at most a window and a bucket past the newest
  elseif not (retryAt and start == now) then
    local free, raw = slotFrom(max(now, last), counts, limit, width, span, gran)
    hint = free - now > maxDelay and min(raw, free - maxDelay) or 0
  end
  out[#out + 1] = hint
  if not next(added) then
    return -- a call that records nothing writes nothing
  end
  -- A bucket this call added to was read, or lies after every stored one:
  -- its count is known, so it is set, not incremented. After a change of
  -- width every bucket counted is new.
  local base = floor(max(start, tonumber(meta[2]) or now) / width)
  local set = {key, 'last', fmt(last), 'wb', fmt(base), 'ws', fmt(load(counts, span, base)), 'w', s.shape}
  for i in pairs(ours and added or counts) do
    if i >= cur - span and counts[i] > 0 then
      set[#set + 1], set[#set + 2] = bucket(width, i), fmt(counts[i])
    end
  end
  write(key, set, meta, s, window, maxDelay, max(last, now))
end

if ARGV[1] ~= 'batch' then
  local out = {now}
  decide(out, KEYS[1], 0)
  return out
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
  decide(out, KEYS[k], 1 + 7 * (k - 1), metas[k])
end
return out
