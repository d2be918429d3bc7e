#!lua flags=no-writes
-- counter_usage.lua: what a Counter-mode tenant has used, writing nothing.
-- After counter_prelude.lua, which package lua puts after this line.
--
-- KEYS[1]  the tenant's window
-- ARGV[1]  limit
-- ARGV[2]  window µs
-- Returns  {now µs, entries the window's buckets hold, entries in buckets
--          ahead of now's, the next free slot µs (before rounding)}
--
-- It reads the window and, with a backlog of more than a window, the list
-- of buckets that left the ring: its cost grows with the backlog, as a
-- report's may; decisions never read the list. Right after a change of
-- window it counts what the decisions do: the ring as reshape moved it,
-- its stand-in for entries that had left it included.
local key, limit = KEYS[1], tonumber(ARGV[1])
local width, span = shape(tonumber(ARGV[2]))
local v = call('GET', key)
local s = v and decode(v)
local same = s and s[1] == width and s[2] == span -- else the list is of the old width
if not same then
  s = reshape(s, width, span, limit)
end
local cur = floor(now / width)
local inWindow, ahead = sum(s, cur - span, cur), sum(s, cur + 1, s[4])
if same and s[4] > cur then
  for _, e in ipairs(call('LRANGE', key .. ':o', 0, -1)) do
    local at, c = string.match(e, '^(%d+) (%d+)$')
    local b = floor(tonumber(at) / width)
    if b > cur then
      ahead = ahead + tonumber(c)
    elseif b >= cur - span then
      inWindow = inWindow + tonumber(c)
    end
  end
end
local _, free = slotFrom(s, max(now, s[3]), limit, 1)
return {now, inWindow, ahead, free}
