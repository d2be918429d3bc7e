-- counter_prelude.lua: what counter.lua, counter_usage.lua and
-- counter_release.lua share, as a fragment, not a script: package lua puts
-- it after each one's shebang line at build time.
--
-- A tenant's window is one STRING of numbers, doubles packed with Redis's
-- struct library (text in a Lua without it, as miniredis's): a header of
--   [1] width, µs   [2] span, buckets before a window's last it reaches
--   [3] last, the newest slot (0: none)   [4] top, the ring's newest bucket
--   [5] x, the expiry ms set   [6] gone, the last moment of the newest
--   entry that left the ring (0: none)   [7] total, the ring's entries
--   [8] count, bucket top's entries (its place in the ring is filled only
--   once the ring moves on, so that an admission in it rewrites the header
--   alone, in place)
-- then [9...], the ring: buckets top-span .. top, bucket i at 9 + i % (span + 1).
-- Slots never go back (FIFO): a new slot is at or after last, in a bucket
-- at or after top, so a window ending at it reaches no bucket older than
-- the ring's, whatever the backlog. A bucket that leaves the ring while a
-- window from now reaches it (a backlog of more than a window) goes to the
-- LIST <key>:o as "<its last moment µs> <entries>", which only Usage and
-- Release read.
--
-- It defines call, max, min, floor, now (Redis time µs), fmt(x) (exact),
-- RING, struct and HEADER (nil without struct), decode, encode, shape,
-- reshape, sum, advance (and what it listed: listed, created), slotFrom.
local call, max, min, floor = redis.call, math.max, math.min, math.floor
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local BUCKETS = 10 -- package admission's counterBuckets
local RING = 9 -- the ring's first index

local function fmt(x)
  return string.format('%d', x) -- exact, where tostring is not
end

local unpacked, packed, HEADER
local struct = rawget(_G, 'struct') -- miniredis has none, and forbids reading a missing global
if struct then
  local function format(n)
    return '<' .. string.rep('d', n)
  end
  unpacked = function(v)
    local s = {struct.unpack(format(#v / 8), v)}
    s[#s] = nil -- the position after the last value
    return s
  end
  packed = function(s)
    return struct.pack(format(#s), unpack(s))
  end
  HEADER = '<dddddddd'
else
  unpacked = function(v)
    local s = {}
    for x in string.gmatch(v, '%S+') do
      s[#s + 1] = tonumber(x)
    end
    return s
  end
  packed = function(s)
    return string.format(string.rep('%d ', #s), unpack(s))
  end
end

-- decode returns the window v holds, its ring's place for bucket top
-- filled; encode returns the string for s.
local function decode(v)
  local s = unpacked(v)
  s[RING + s[4] % (s[2] + 1)] = s[8]
  return s
end

local function encode(s)
  s[8] = s[RING + s[4] % (s[2] + 1)]
  return packed(s)
end

-- shape returns the width and span of a window of window µs.
local function shape(window)
  local width = max(1, floor(window / BUCKETS))
  return width, math.ceil(window / width)
end

-- sum returns the entries the ring holds in buckets lo..hi.
local function sum(s, lo, hi)
  local span, top, n = s[2], s[4], 0
  if lo <= top - span and hi >= top then
    return s[7]
  end
  for i = max(lo, top - span), min(hi, top) do
    n = n + s[RING + i % (span + 1)]
  end
  return n
end

-- reshape returns a window of width and span holding what s holds at
-- another shape (or nothing, when s is nil): each bucket of s goes to the
-- bucket of its last moment, or of the newest slot if sooner, so every
-- window that could hold an entry counts it; and when entries that left
-- s's ring may lie in a window from now on, the bucket of the newest of
-- them counts as a full window (limit). The list stays at s's width:
-- decisions drop it, Usage leaves it out.
local function reshape(s, width, span, limit)
  local newest = s and max(s[3], now) or now
  local r = {width, span, 0, floor(newest / width), 0, 0, 0, 0}
  for i = RING, RING + span do
    r[i] = 0
  end
  if not s then
    return r
  end
  r[3], r[5] = s[3], s[5]
  local function put(at, c)
    local b = floor(min(at, newest) / width)
    if b >= r[4] - span then
      r[RING + b % (span + 1)] = r[RING + b % (span + 1)] + c
      r[7] = r[7] + c
    elseif c > 0 then
      r[6] = max(r[6], at)
    end
  end
  for i = s[4] - s[2], s[4] do
    put((i + 1) * s[1] - 1, s[RING + i % (s[2] + 1)])
  end
  if s[6] > 0 then
    put(s[6], limit)
  end
  return r
end

-- advance moves the ring's newest bucket up to b. A bucket it drops goes
-- to key's list if a window from now reaches it: listed is then the list's
-- length, and created says whether this call made the list.
local listed, created = 0, false
local function advance(s, key, b)
  local width, span, top = s[1], s[2], s[4]
  local live = floor(now / width) - span
  for i = top - span, min(top, b - span - 1) do
    local p = RING + i % (span + 1)
    if s[p] > 0 then
      local at = (i + 1) * width - 1
      s[6] = max(s[6], at)
      if i >= live then
        listed = call('RPUSH', key .. ':o', fmt(at) .. ' ' .. fmt(s[p]))
        created = created or listed == 1
      end
      s[7], s[p] = s[7] - s[p], 0
    end
  end
  s[4] = max(top, b)
end

-- slotFrom returns the first free slot at or after t, which is at or
-- after now and in a bucket at or after the ring's top, rounded up to g
-- when ahead of now, and that slot before rounding. A slot is free when
-- the buckets a window ending at it overlaps hold fewer than limit: counting
-- them whole never undercounts. A later slot's window holds no more, so
-- rounding up keeps it free.
local function slotFrom(s, t, limit, g)
  local width, span = s[1], s[2]
  while true do
    local b = floor(t / width)
    if sum(s, b - span, b) < limit then
      break
    end
    local o = max(b - span, s[4] - span) -- the oldest bucket with entries
    while s[RING + o % (span + 1)] <= 0 do
      o = o + 1
    end
    t = (o + span + 1) * width -- nothing frees up sooner
  end
  if t <= now then
    return now, now
  end
  local r = math.fmod(t, g) -- exact, unlike t / g
  return r > 0 and t - r + g or t, t
end
