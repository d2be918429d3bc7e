#!lua
-- counter_release.lua: gives back one Counter-mode entry. After
-- counter_prelude.lua, which package lua puts after this line; the
-- shebang makes Redis refuse it whole over maxmemory.
--
-- KEYS[1]  the tenant's counters
-- ARGV[1]  the entry's slot µs
-- Returns  {now µs, 1 if an entry was released else 0}
--
-- It takes the entry from the bucket its slot falls in at the width the
-- hash counts in now (which need not be the one it was counted in), never
-- below zero. The stored window sum may hold the entry: it is dropped,
-- and the next decision reads the window.
local key = KEYS[1]
local width = tonumber(string.match(call('HGET', key, 'w') or '', '^%d+'))
if not width then
  return {now, 0}
end
local f = bucket(width, floor(tonumber(ARGV[1]) / width))
local c = tonumber(call('HGET', key, f)) or 0
if c <= 0 then
  return {now, 0}
end
call('HSET', key, f, fmt(c - 1), 'wb', '')
return {now, 1}
