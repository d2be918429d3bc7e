-- fair_park.lua: a producer's task in a dispatched queue: it goes straight
-- in, waits its turn, or finds the tenant's waiting backlog full. Runs
-- after fair.lua (KEYS and the first two ARGV are its).
--
-- ARGV[3]  tenant
-- ARGV[4]  task ID
-- ARGV[5]  not-before µs (0 for none)
-- ARGV[6]  the task's asynq.Unique TTL in ms (0 for none)
-- ARGV[7]  the tenant's MaxInFlight (0: no cap)
-- ARGV[8]  the tenant's MaxParked
-- ARGV[9]  the tenant's weight (> 0)
-- Returns  {code, now µs, tasks the tenant has waiting}, code:
--          0 wait: the entry is stored, the caller writes the task parked
--          1 in: granted (state f), the caller admits and writes it
--          2 full: nothing stored, the backlog is at MaxParked
--          3 direct: no live worker with a gate serves the queue (or none
--            is fair and the tenant has no cap): nothing stored
--          4 in already: the ID is the dispatcher's (a retry), nothing
--            changes; the caller admits and writes it, and gives nothing
--            back
--
-- A task goes straight in only when its tenant has nothing waiting, is
-- under its cap and awake, no tenant waits with an earlier start tag, and
-- the queue has space: then nothing waiting could have gone first. A task that must not start for more than a
-- second (its own ProcessAt) waits in limbo until then, holding no place
-- and no one back, and then goes to the head of its tenant's line.
local T, id, nb, uttl = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local cap, maxParked, wt = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])

local live, fair, total = capacity()
seen()
if not live or (not fair and cap == 0) then
  return {3, now, 0}
end
if call('HEXISTS', run, id) == 1 then
  return {4, now, 0}
end
local th, w = P .. 't:' .. T, P .. 'w:' .. T
call('HSET', th, 'cap', cap, 'wt', fmt(wt))
local waiting = call('LLEN', w)
local h = call('HMGET', th, 'tag', 'n')
local later = tonumber(nb) > now + 1000000
local tag = math.max(num(h[1], 0), floor)
local head = call('ZRANGE', vt, 0, 0, 'WITHSCORES')
if waiting == 0 and not later and not call('ZSCORE', sleep, T) and (cap == 0 or num(h[2], 0) < cap)
    and (#head == 0 or tag <= tonumber(head[2])) and room(fair, total) > 0 then
  grant(T, id, nil, tag)
  call('HSET', meta, 'floor', fmt(floor))
  return {1, now, 0}
end
if waiting >= maxParked then
  settle(T)
  return {2, now, waiting}
end
local e = nb .. '|' .. nowS .. '|' .. uttl .. '|' .. id
call('PERSIST', th)
if later then
  toLimbo(T, e, tonumber(nb))
  return {0, now, waiting}
end
call('RPUSH', w, e)
eligible(T)
return {0, now, waiting + 1}
