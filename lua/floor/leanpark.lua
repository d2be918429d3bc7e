-- leanpark.lua: a stand-in for fair_park.lua, built in with the tag
-- admitq_dispatchfloor, with its arguments and its reply. The least a park
-- can be: a task of a queue a worker with a gate serves goes straight in
-- while its one line is empty and the queue has room, recorded in run and
-- fresh as fair_park.lua records one, and else waits at the end of that
-- first-in-first-out line, whatever its tenant. No tenant record, no order
-- by tag, no cap, key, pause or retry check. A floor for the cost of fair
-- dispatch (with leanturn.lua), not a rule. Given the task's message, it
-- writes a task that waits, as fair_park.lua does.
local T, id, nb, uttl = ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local msg = ARGV[15 + 3 * tonumber(ARGV[14])]
if msg and call('EXISTS', TP .. id) == 1 then
  return {'exists', now, 0}
end
local recent, fair, total = capacity()
if not recent then
  return {'direct', now, 0}
end
local line = P .. 'lean'
if call('LLEN', line) == 0 and room(fair, total) > 0 then
  call('HSET', run, id, 'f|0|' .. nowS .. '|' .. T)
  call('ZADD', fresh, nowS, id)
  return {'in', now, 0}
end
local waiting = call('RPUSH', line, T .. '\n' .. nb .. '|' .. nowS .. '|' .. uttl .. '|' .. id)
if msg then
  call('HSET', TP .. id, 'msg', msg, 'state', 'scheduled')
  call('ZADD', scheduled, PARKED, id)
  return {'written', now, waiting}
end
return {'wait', now, waiting}
