-- counter_prelude.lua: what the counter-mode scripts (counter.lua,
-- counter_usage.lua, counter_release.lua) share, as a fragment, not a
-- script: package lua puts it after each one's shebang line at build time.
--
-- The tenant's counters are a HASH:
--   "w"         "<w>:<span>": the width µs of the buckets it counts in,
--               and how many buckets before the current one a window
--               reaches
--   "<w>:<i>"   the entries of bucket i at width w: slots in [i*w, (i+1)*w)
--   "last"      the newest slot handed out, µs, or an earlier one when
--               that is at most now
--   "ws", "wb"  the entries of buckets wb-span..wb, which the last
--               recording call read or wrote: a window's sum, so that the
--               next need not add the window up again
--   "c", "s"    the cursor of the sweep that deletes dead buckets, and the
--               bucket (of now) the last sweep ran in
--   "x"         the expiry ms last set on the key
-- Buckets are named by their width, so a change of width starts new names
-- and a script knows, before it reads anything, the names of the buckets
-- it will need.
--
-- It defines:
--   call, max, min, floor, now (Redis time µs), fmt(x) (an integer,
--   exact), nowS (fmt(now))
--   shapeOf(windowS, bucketsS)  width, span (buckets before the current
--                               one that a window reaches), cur and the
--                               field names every key of that quota shares
--   bucket(width, i)            the field of bucket i
--   read(key, width, counts, lo, hi)  counts[i] = bucket i, for lo..hi
--   load(counts, span, b)       entries a window ending in bucket b
--                               counts, and the oldest bucket holding any
--   change(key, counts, ow, width, window, last, limit)  counts, at
--                               width, a hash kept at width ow
--   slotFrom(t, counts, limit, width, span, g)  the first free slot at or
--                               after t, rounded up to g when ahead, and
--                               the first moment free before rounding
local call, max, min, floor, format = redis.call, math.max, math.min, math.floor, string.format
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- %d takes C's integer path: exact for every integer a double holds, and
-- cheaper than the %.17g Redis applies to a number passed to redis.call.
local function fmt(x)
  return format('%d', x)
end

local nowS = fmt(now)

local function bucket(width, i)
  return format('%d:%d', width, i)
end

local lastWindow, lastBuckets, lastShape
local function shapeOf(windowS, bucketsS)
  if windowS == lastWindow and bucketsS == lastBuckets then
    return lastShape -- a batch's keys share a quota, as a rule
  end
  local window = tonumber(windowS)
  local width = max(1, floor(window / tonumber(bucketsS)))
  local span = math.ceil(window / width)
  local cur = floor(now / width)
  lastWindow, lastBuckets = windowS, bucketsS
  lastShape = {width = width, span = span, cur = cur, widthS = fmt(width), spanS = fmt(span),
    curS = fmt(cur), shape = fmt(width) .. ':' .. fmt(span), gone = bucket(width, cur - span - 1), now = bucket(width, cur)}
  return lastShape
end

-- read asks by name, in chunks, or scans the hash when it holds fewer
-- fields than the range (only Usage asks for long ranges).
local function read(key, width, counts, lo, hi)
  if hi < lo then
    return
  end
  if hi - lo > 64 and hi - lo + 1 > call('HLEN', key) then
    local c, prefix = '0', fmt(width) .. ':'
    repeat
      local r = call('HSCAN', key, c, 'MATCH', prefix .. '*', 'COUNT', 1000)
      c = r[1]
      for j = 1, #r[2], 2 do
        local i = tonumber(string.sub(r[2][j], #prefix + 1))
        if i and i >= lo and i <= hi then
          counts[i] = tonumber(r[2][j + 1])
        end
      end
    until c == '0'
    return
  end
  for s = lo, hi, 1000 do
    local f = {key}
    for i = s, min(hi, s + 999) do
      f[#f + 1] = bucket(width, i)
    end
    local v = call('HMGET', unpack(f))
    for j = 1, #f - 1 do
      counts[s + j - 1] = tonumber(v[j])
    end
  end
end

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

local function ceil(x, g)
  local r = math.fmod(x, g) -- exact, unlike x / g
  if r > 0 then
    return x - r + g
  end
  return x
end

-- A slot is free when the buckets a window ending at it overlaps hold
-- fewer than limit entries: counting them whole never undercounts.
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
      t = ceil(t, g)
      if floor(t / width) == b then -- else check the bucket it fell in
        return t, raw
      end
    else
      t = max(t, (oldest + span + 1) * width) -- nothing frees up sooner
      raw = nil
    end
  end
  return t, raw or t
end

local MOVE = 64
-- change recounts a hash of width ow in counts at width: the MOVE newest
-- buckets each go to the bucket of its last moment (or of the newest slot,
-- if sooner), so every window that could hold an entry counts it. In a
-- hash of more than 4 * MOVE fields, older ones that a window from now on
-- can reach are counted as a full window at the moment the moved ones
-- start (no window holds more than limit); a smaller hash is read whole.
local function change(key, counts, ow, width, window, last, limit)
  local lo, hi = floor((now - window) / ow), floor(last / ow)
  local from = max(lo, hi - MOVE + 1)
  if from > lo and call('HLEN', key) <= 4 * MOVE then
    from = lo -- a small hash: read it whole
  end
  if from > lo then
    local b = floor(min(from * ow - 1, last) / width)
    counts[b] = limit
  end
  local old = {}
  read(key, ow, old, from, hi)
  for i, c in pairs(old) do
    if c > 0 then
      local b = floor(min((i + 1) * ow - 1, last) / width)
      counts[b] = (counts[b] or 0) + c
    end
  end
end

