#!lua flags=no-writes
-- counter_usage.lua: what a Counter-mode tenant has used, writing nothing.
-- After counter_prelude.lua, which package lua puts after this line.
--
-- KEYS[1]  the tenant's counters
-- ARGV[1]  limit
-- ARGV[2]  window µs
-- ARGV[3], ARGV[4]  unused (counter.lua's max delay and granularity)
-- ARGV[5]  buckets per window
-- Returns  {now µs, entries the window's buckets hold, entries in buckets
--          ahead of now's, the next free slot µs (before rounding)}
--
-- It reads the buckets from the window to the newest slot: its cost grows
-- with the backlog, as a report's may; decisions never read them.
local key, limit, window = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2])
local s = shapeOf(ARGV[2], ARGV[5])
local width, span, cur = s.width, s.span, s.cur
local meta = call('HMGET', key, 'w', 'last')
local stored, last = meta[1] and tonumber(string.match(meta[1], '^%d+')), tonumber(meta[2]) or now
local counts = {}
if stored and stored ~= width then
  change(key, counts, stored, width, window, max(last, now), limit)
elseif stored then
  read(key, width, counts, cur - span, max(cur, floor(last / width)))
end
local ahead = 0
for i, c in pairs(counts) do
  if i > cur then
    ahead = ahead + c
  end
end
return {now, (load(counts, span, cur)), ahead, (slotFrom(max(now, last), counts, limit, width, span, 1))}
