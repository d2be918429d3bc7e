#!lua
-- counter_release.lua: gives back one Counter-mode entry. After
-- counter_prelude.lua, which package lua puts after this line; the
-- shebang makes Redis refuse it whole over maxmemory.
--
-- KEYS[1]  the tenant's window
-- ARGV[1]  the entry's slot µs
-- Returns  {now µs, 1 if an entry was released else 0}
--
-- It takes the entry from the bucket its slot falls in at the width the
-- window counts in now (which need not be the one it was counted in), in
-- the ring or in the list of buckets that left it, never below zero. The
-- newest slot stays, so later slots stay behind it (FIFO), unless nothing
-- is left in any window from now.
local key = KEYS[1]
local v = call('GET', key)
if not v then
  return {now, 0}
end
local s = decode(v)
local width, span = s[1], s[2]
local b = floor(tonumber(ARGV[1]) / width)
local p = RING + b % (span + 1)
if b >= s[4] - span and b <= s[4] then
  if s[p] <= 0 then
    return {now, 0}
  end
  s[p], s[7] = s[p] - 1, s[7] - 1
  if s[7] == 0 and s[6] < (floor(now / width) - span) * width then
    -- Nothing is left in the ring, and nothing that left it is in a window
    -- from now: the newest slot goes back, as the log's does.
    s[3], s[4] = 0, floor(now / width)
  end
  call('SET', key, encode(s), 'KEEPTTL')
  return {now, 1}
end
for i, e in ipairs(call('LRANGE', key .. ':o', 0, -1)) do
  local at, c = string.match(e, '^(%d+) (%d+)$')
  if floor(tonumber(at) / width) == b and tonumber(c) > 0 then
    call('LSET', key .. ':o', i - 1, at .. ' ' .. fmt(tonumber(c) - 1))
    return {now, 1}
  end
end
return {now, 0}
