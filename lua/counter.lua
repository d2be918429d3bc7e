-- counter.lua: the approximate, O(1)-in-Limit mode of the slot rule, for
-- tenants whose quotas are too large to log every entry.
--
-- KEYS[1]  the tenant's counters: a HASH of
--            "w"     the width µs of the buckets it counts in, as "<w>.0"
--                    when this script wrote it (see "ws")
--            "g"     their generation, which a change of width starts anew
--            "<g>:<i>"  the entries of bucket i of generation g: slots in
--                    [i*w, (i+1)*w) of Redis time
--            "n"     the entries of all buckets of generation g
--            "last"  the newest slot handed out, µs
--            "c"     the cursor of the sweep that deletes dead buckets
--            "s"     the bucket (of now) the last sweep ran in
--            "x"     the expiry ms last set on the key
--            "ws"    the entries of the buckets "wb"-"wn".."wb" of
--                    generation g, which the last recording call read or
--                    wrote: a window's sum, so the next need not add it up
--            "wn"    the span that sum covers: windows of one width can
--                    span different numbers of buckets
-- ARGV[1]  limit
-- ARGV[2]  window µs
-- ARGV[3]  max delay µs
-- ARGV[4]  granularity µs (1 = none)
-- ARGV[5]  buckets per window
-- ARGV[6]  n, the number of requests, decided in order; 0 asks for usage
-- ARGV[7]  not-before time µs (0 = none): the requests start no earlier
-- ARGV[8]  (with n = 1) a slot µs to release an entry from instead
-- Or, for several tenants in one call (a batch), ARGV "batch" and then,
-- for each key in order, its ARGV[1] to ARGV[7] above, with n > 0.
-- Returns  {now µs, then for each request: outcome, at µs, remaining;
--          then the retry hint µs}
--          outcome 0 admitted, 1 deferred, 2 rejected, and the retry hint,
--          as in admit.lua;
--          for n = 0: {now µs, entries counted in the window, entries ahead,
--          next free slot µs}, writing nothing;
--          for a release: {now µs, 1 if an entry was released else 0};
--          for a batch: {now µs, then each key's reply without its now}
--
-- A slot is free when the buckets that overlap the window ending at it hold
-- fewer than limit entries. Counting every overlapping bucket whole is an
-- upper bound on the true count, so the mode never admits more than limit in
-- any window; the price is under-admission by at most one bucket's time.
-- A new slot is the first free one at or after the later of now, the
-- not-before time and the newest slot (FIFO); max delay is compared with the
-- rounded slot, from the later of now and the not-before time, as in
-- admit.lua. Once one request is rejected every later one is too.
--
-- Cost. Buckets are numbered by absolute time with the stored width, so a
-- decision reads only the buckets of the window it looks at (every slot it
-- gives is at or after the newest), however many lie ahead: O(buckets in a
-- window). A change of width (the quota's window changed) moves at most
-- MOVE buckets, the newest, into a new generation, each to the new bucket
-- that holds its last moment (or the newest slot, if sooner): no entry is
-- counted earlier than it can be. Older entries that a window from now on
-- can still reach go, all together, into the new bucket of the newest
-- moment they can have. Buckets of older generations, and buckets that no
-- window from now on reaches, are deleted by a sweep of SWEEP fields a call
-- (HSCAN): deletion never walks the whole hash.
-- A call that records nothing writes nothing. A recording call starts a
-- sweep once per window of time, and goes on with one that a large hash
-- needs once per bucket of time. It sets the key's expiry up to window/8
-- past what it must be, and moves it only when it would fall short, so that
-- the PEXPIREAT comes about once in that time, not on every call.
-- Each redis.call, and each number Lua formats, has a fixed cost, so the
-- common path (every slot now, the width never changed) makes three calls:
-- TIME, one HMGET of the fields above and two buckets, and one HSET of
-- what changed, the bucket's new count included. The hash keeps the sum of
-- the window of the last call, so a call reads the bucket that left the
-- window since, not the window's eleven. Where that does not serve (a slot
-- ahead, a gap of 2 to 10 buckets since the last call, a window it fills),
-- a second HMGET reads the window. A batch reads every key's fields
-- before it writes any (which also checks their types), and the bounds
-- and field names that keys of one quota share are made once a call.
-- A TYPE check per key, and helpers made anew for each key, cost 8-24% of
-- the script side by side under 64 callers (BenchmarkCounterScriptBatch,
-- five runs), and 20-23% one call at a time.
local call, max, min, floor, format = redis.call, math.max, math.min, math.floor, string.format
local SWEEP, MOVE = 64, 64
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- The functions below take what they need as arguments: a function
-- defined inside decide would be a new closure for every key of a batch.

-- fmt formats an integer exactly. %d takes C's integer path: less than
-- half the time of %.0f, or of the %.17g that Redis applies to a number
-- passed to redis.call, and exact for every integer a double holds.
local function fmt(x)
  return format('%d', x)
end
local nowS = fmt(now)

-- field names bucket i of generation g.
local function field(g, i)
  return format('%d:%d', g, i)
end

-- names appends to into the fields of generation g's buckets lo..hi.
local function names(g, lo, hi, into)
  for i = lo, hi do
    into[#into + 1] = field(g, i)
  end
  return into
end

-- ceil rounds x up to a multiple of the granularity g; fmod is exact.
local function ceil(x, g)
  local r = math.fmod(x, g)
  if r > 0 then
    return x - r + g
  end
  return x
end

-- load returns the entries in counts' buckets that a window ending in
-- bucket b can overlap (b and the span before it), and the oldest of those
-- buckets that holds any.
local function load(counts, span, b)
  local sum, oldest = 0, nil
  for i = b - span, b do
    local c = counts[i]
    if c and c > 0 then
      sum = sum + c
      oldest = oldest or i
    end
  end
  return sum, oldest
end

-- slotFrom returns the first free slot at or after t under limit, counting
-- counts' buckets of width and span, rounded up to the granularity g when
-- it lies ahead, and the first moment a request would be admitted there
-- without rounding.
local function slotFrom(t, counts, limit, width, span, g)
  local raw = nil
  for _ = 1, 10000 do
    local b = floor(t / width)
    local sum, oldest = load(counts, span, b)
    if sum < limit then
      if t <= now then
        return now, now
      end
      raw = raw or t
      if math.fmod(t, g) == 0 then
        return t, raw
      end
      t = ceil(t, g) -- check the bucket the rounded slot falls in
      if floor(t / width) == b then
        return t, raw
      end
    else
      -- Nothing frees up before the oldest counted bucket leaves.
      t = max(t, (oldest + span + 1) * width)
      raw = nil
    end
  end
  return t, raw or t
end

-- read fills counts with key's stored buckets lo..hi of generation gen: by name, or by
-- scanning the hash when it holds fewer fields than that (Usage only ever
-- asks for many).
local function read(key, gen, counts, lo, hi)
  if hi < lo then
    return
  end
  if hi - lo + 1 > 64 and hi - lo + 1 > call('HLEN', key) then
    local c = '0'
    repeat
      local r = call('HSCAN', key, c, 'COUNT', 1000)
      c = r[1]
      local kv = r[2]
      for j = 1, #kv, 2 do
        local g, i = string.match(kv[j], '^(%d+):(%-?%d+)$')
        if g and tonumber(g) == gen then
          i = tonumber(i)
          if i >= lo and i <= hi then
            counts[i] = tonumber(kv[j + 1])
          end
        end
      end
    until c == '0'
    return
  end
  for s = lo, hi, 1000 do
    local f = names(gen, s, min(hi, s + 999), {key})
    local v = call('HMGET', unpack(f))
    for j = 1, #f - 1 do
      local c = tonumber(v[j])
      if c then
        counts[s + j - 1] = c
      end
    end
  end
end

-- shapeOf returns what every key of a window and a number of buckets
-- (ARGV strings) shares on this call's time: the width, span, the current
-- bucket and the strings made of them. A batch's keys share a quota, as a
-- rule, so it keeps the last one.
local lastWindow, lastBuckets, lastShape
local function shapeOf(windowS, bucketsS)
  if windowS == lastWindow and bucketsS == lastBuckets then
    return lastShape
  end
  local window = tonumber(windowS)
  local width = max(1, floor(window / tonumber(bucketsS)))
  local span = math.ceil(window / width) -- buckets before the current one that a window can reach
  local cur = floor(now / width)
  lastWindow, lastBuckets = windowS, bucketsS
  lastShape = {
    width = width, span = span, cur = cur,
    stamp = fmt(width) .. '.0', spanS = fmt(span), curS = fmt(cur),
    -- generation 0's bucket that left the window a bucket of time ago,
    -- and the current one
    gone = field(0, cur - span - 1), now = field(0, cur),
  }
  return lastShape
end

-- guesses says whether decide, for the ARGV from a + 1 on (see decide),
-- reads with its fields the buckets of generation 0 that the sum needs
-- (see below): when it records requests that start now.
local function guesses(ARGV, a, release)
  return tonumber(ARGV[a + 6]) > 0 and not release and tonumber(ARGV[a + 7]) <= now
end

-- readFields returns the fields decide reads first, for key with the ARGV from
-- a + 1 on (see decide), in one HMGET: with the two buckets when guessed.
local function readFields(key, ARGV, a, guessed)
  if guessed then
    local s = shapeOf(ARGV[a + 2], ARGV[a + 5])
    return call('HMGET', key, 'w', 'g', 'n', 'last', 'c', 's', 'x', 'ws', 'wb', 'wn', s.gone, s.now)
  end
  return call('HMGET', key, 'w', 'g', 'n', 'last', 'c', 's', 'x', 'ws', 'wb', 'wn')
end

-- decide decides the requests of one tenant's key, with that key's ARGV
-- from a + 1 on (above): the whole call when it has one key (a = 0), each
-- key of a batch in turn when it has several (below), all on the one Redis
-- time now. meta is the reply of the key's HMGET (fields), when the batch
-- read it first.
local function decide(key, ARGV, a, meta)
  local release = a == 0 and ARGV[8]
  local limit = tonumber(ARGV[a + 1])
  local window = tonumber(ARGV[a + 2])
  local maxDelay = tonumber(ARGV[a + 3])
  local gran = tonumber(ARGV[a + 4])
  local n = tonumber(ARGV[a + 6])
  local start = max(now, tonumber(ARGV[a + 7]))
  local shape = shapeOf(ARGV[a + 2], ARGV[a + 5])
  local width, span, cur = shape.width, shape.span, shape.cur

  -- "ws" is the sum of the buckets wb-span..wb, which the recording call
  -- that wrote them read or wrote. From it a call reads one bucket, not a
  -- window's: the one that left the window, if a bucket of time has passed,
  -- and the current one, whose new count it sets. It reads them with the
  -- fields above in one HMGET, guessing generation 0; it reads the window
  -- when the guess or the sum does not serve (see below).
  -- This script writes the width as "<w>.0", which reads as the same number.
  -- An older admitq keeps no sum, and rewrites "w" as "<w>" whenever it
  -- records: a sum is only used under the stamp. (A release by one leaves
  -- the sum too high, never too low.)
  local stamp = shape.stamp
  local guessed = guesses(ARGV, a, release)
  meta = meta or readFields(key, ARGV, a, guessed)
  local storedWidth, gen = tonumber(meta[1]), tonumber(meta[2]) or 0
  local total, last, cursor = tonumber(meta[3]) or 0, tonumber(meta[4]) or now, meta[5] or '0'
  local swept, expiry = tonumber(meta[6]), tonumber(meta[7]) or -1
  local ours = meta[1] == stamp
  -- A sum over another span (a window of the same width but another
  -- length) would miss buckets of this one's window, or subtract one it
  -- never held.
  local ws = ours and tonumber(meta[10]) == span and tonumber(meta[8])
  local wb = tonumber(meta[9])

  if release then
    -- Release, from the bucket the slot is counted in now; never below zero.
    if not storedWidth then
      return {now, 0}
    end
    local f = field(gen, floor(tonumber(release) / storedWidth))
    local c = tonumber(call('HGET', key, f)) or 0
    if c > 0 then
      -- The sum may hold the entry: "wb" unset, the next call reads the window.
      call('HSET', key, f, c - 1, 'n', total - 1, 'wb', '')
      return {now, 1}
    end
    return {now, 0}
  end

  -- counts holds the buckets this call may look at, of generation gen at
  -- width; moved says they are not in Redis yet (a change of width).
  local counts, moved = {}, false
  local fast = nil -- the window's sum, when the sum serves (see below)
  -- base is the bucket of the first slot this call can give: no slot it
  -- gives, and none stored, lies in a window that reaches a bucket before
  -- base - span.
  local base = floor(max(start, last) / width)

  if storedWidth and storedWidth ~= width then
    -- The window changed. Move the newest buckets to the new width, each to
    -- the new bucket of its last moment or of the newest slot, whichever is
    -- sooner, so that every window that could hold one of its entries counts
    -- it. Older ones go together to the new bucket of the last moment they
    -- can have, unless no window from now on reaches them.
    local ow, og = storedWidth, gen
    gen = gen + 1
    local lo = floor((now - window) / ow) -- older buckets end before any window from now on
    local hi = floor(last / ow)
    local from = max(lo, hi - MOVE + 1)
    local sum = 0
    if from <= hi then
      local f = names(og, from, hi, {key})
      local v = call('HMGET', unpack(f))
      for j = 1, #f - 1 do
        local c = tonumber(v[j])
        if c and c > 0 then
          local b = floor(min((from + j) * ow - 1, last) / width)
          counts[b] = (counts[b] or 0) + c
          sum = sum + c
        end
      end
    end
    if from > lo and total > sum then
      local b = floor(min(from * ow - 1, last) / width)
      counts[b] = (counts[b] or 0) + total - sum
    else
      total = sum
    end
    moved = true
  elseif storedWidth and n == 0 then
    read(key, gen, counts, floor(now / width) - span, floor(last / width)) -- the window and what lies ahead
  elseif storedWidth then
    -- The buckets a window ending at the first slot this call can give
    -- reaches; every slot after it reaches fewer of them, and none of the
    -- stored buckets lies after it.
    -- The sum serves when every slot this call gives is now (the newest is
    -- not ahead), no bucket after wb holds any, and the buckets that left
    -- the window since wb are the one read (a bucket of time passed) or all
    -- of wb's (a window passed). A decision that fills the window needs its
    -- oldest bucket, and one that gives a later slot other windows: they
    -- read the buckets.
    local b, hi = base, min(base, floor(last / width))
    local sum = nil
    if guessed and gen == 0 and ws and wb and last <= now and hi <= wb and wb <= cur then
      if wb == cur then
        sum = ws
      elseif wb == cur - 1 then
        sum = ws - (tonumber(meta[11]) or 0)
      elseif wb < cur - span then
        sum = 0
      end
    end
    if sum and sum + n < limit then
      -- Every request is admitted now, and only cur is written.
      fast = sum
      counts[cur] = wb == cur and tonumber(meta[12]) or 0
    else
      read(key, gen, counts, b - span, hi)
    end
  elseif meta[4] then
    -- Buckets of an older layout, uncounted: every window that reaches the
    -- newest slot counts as full, which holds whatever they were.
    counts[floor(last / width)] = limit
    total = limit
    moved = true
  end

  if n == 0 then
    local ahead = 0
    for i, c in pairs(counts) do
      if i > cur then
        ahead = ahead + c
      end
    end
    return {now, (load(counts, span, cur)), ahead, (slotFrom(max(now, last), counts, limit, width, span, 1))}
  end

  local out = {now}
  local retryAt = nil
  local added = {}
  local any = false
  if fast then
    -- The window holds fast + k entries after the k-th request.
    for k = 1, n do
      out[3 * k - 1], out[3 * k], out[3 * k + 1] = 0, now, limit - fast - k
    end
    counts[cur], added[cur] = counts[cur] + n, n
    total, last, any = total + n, now, true
  end
  for _ = 1, fast and 0 or n do
    local code, slot = 2, retryAt
    if not retryAt then
      local raw
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
      counts[b] = (counts[b] or 0) + 1
      added[b] = (added[b] or 0) + 1
      total = total + 1
      last = slot
      any = true
      if code == 0 then
        remaining = max(0, limit - load(counts, span, b))
      end
    end
    out[#out + 1] = code
    out[#out + 1] = slot
    out[#out + 1] = remaining
  end
  -- The hint speaks of requests without a not-before time. A rejection with
  -- one may not hold for them: ask afresh.
  local hint = 0
  if fast then
    hint = 0 -- the window has room now
  elseif retryAt and start == now then
    hint = retryAt
  else
    local free, raw = slotFrom(max(now, last), counts, limit, width, span, gran)
    if free - now > maxDelay then
      hint = min(raw, free - maxDelay)
    end
  end
  out[#out + 1] = hint
  if not any then
    return out
  end

  -- Sweep: delete what no window from now on counts, a few fields a call.
  -- A scan starts once per window of time (and at every change of width):
  -- the buckets that died since the last one, at most a window's, are all in
  -- a small hash, which one HSCAN returns whole. A scan of a larger hash goes
  -- on once per bucket of time until it is done. The sweep reads the hash
  -- before this call's writes, which touch no bucket it deletes.
  local sweep = moved or not swept or cur < swept
  if not sweep then
    if cursor == '0' then
      sweep = cur - swept > span
    else
      sweep = cur ~= swept
    end
  end
  if sweep then
    local r = call('HSCAN', key, cursor, 'COUNT', SWEEP)
    local kv, dead, seen = r[2], {}, {}
    cursor, swept = r[1], cur
    for j = 1, #kv, 2 do
      local f = kv[j]
      if not seen[f] then
        seen[f] = true
        local g, i = string.match(f, '^(%d+):(%-?%d+)$')
        if g then
          if tonumber(g) ~= gen then
            dead[#dead + 1] = f -- moved at a change of width, or reaching no window
          elseif tonumber(i) < cur - span then
            dead[#dead + 1] = f
            total = total - tonumber(kv[j + 1])
          end
        elseif f ~= 'w' and f ~= 'g' and f ~= 'n' and f ~= 'last' and f ~= 'c' and f ~= 's' and f ~= 'x' and f ~= 'ws' and f ~= 'wb' and f ~= 'wn' then
          dead[#dead + 1] = f -- not ours: an older layout's bucket
        end
      end
    end
    for s = 1, #dead, 1000 do
      call('HDEL', key, unpack(dead, s, min(#dead, s + 999)))
    end
  end

  local need = math.ceil((last + window + width) / 1000) + 1 -- ms
  local set = {key, 'n', fmt(total), 'last', last == now and nowS or fmt(last), 'ws', fmt(fast and fast + n or load(counts, span, base)), 'wb', base == cur and shape.curS or fmt(base), 'wn', shape.spanS}
  if expiry < need then
    expiry = need + floor(window / 8000)
    local x = fmt(expiry)
    call('PEXPIREAT', key, x)
    set[#set + 1], set[#set + 2] = 'x', x
  end
  if sweep then
    set[#set + 1], set[#set + 2], set[#set + 3], set[#set + 4] = 'c', cursor, 's', fmt(swept)
  end
  -- One HSET writes the buckets and what changed of the rest. A bucket this
  -- call added to was read above, or lies after the newest slot's, where no
  -- stored bucket does: its count is known, so it is set, not incremented.
  if not ours then
    set[#set + 1], set[#set + 2], set[#set + 3], set[#set + 4] = 'w', stamp, 'g', gen
  end
  if moved then
    for i, c in pairs(counts) do
      if c > 0 and i >= cur - span then
        set[#set + 1], set[#set + 2] = field(gen, i), c
      end
    end
  else
    for i in pairs(added) do
      set[#set + 1], set[#set + 2] = guessed and gen == 0 and i == cur and shape.now or field(gen, i), fmt(counts[i])
    end
  end
  call('HSET', unpack(set))
  return out
end

if ARGV[1] ~= 'batch' then
  return decide(KEYS[1], ARGV, 0)
end

-- A batch: every key is read (HMGET) before any is written, so that a key
-- of the wrong type fails the call whole, as admit.lua's count does; a
-- call that failed halfway would have recorded, without IDs, entries that
-- a retry records again. A key that comes again in the batch is read again
-- when its turn comes, after the writes before it.
local metas, seen = {}, {}
for k = 1, #KEYS do
  local key = KEYS[k]
  if not seen[key] then
    seen[key] = true
    local a = 1 + 7 * (k - 1)
    local ok, meta = pcall(readFields, key, ARGV, a, guesses(ARGV, a))
    if not ok then
      local ty = call('TYPE', key).ok
      if ty == 'hash' or ty == 'none' then
        error(meta) -- not the key's type: pass the error on
      end
      return redis.error_reply('WRONGTYPE ' .. key .. ' holds a ' .. ty .. ', not a hash of counters')
    end
    metas[k] = meta
  end
end
local out = {now}
for k = 1, #KEYS do
  local r = decide(KEYS[k], ARGV, 1 + 7 * (k - 1), metas[k])
  for i = 2, #r do
    out[#out + 1] = r[i]
  end
end
return out
