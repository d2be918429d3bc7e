-- leanturn.lua: a stand-in for fair_dispatch.lua, built in with the tag
-- admitq_dispatchfloor, with its arguments and its reply. The least a turn
-- can be, with leanpark.lua's line:
--   * a finish frees its place, once asynq has marked it done;
--   * a grant the gate admitted goes into asynq's pending list while asynq
--     still keeps it parked;
--   * a task that went straight in leaves fresh once asynq has it
--     (fair.lua's seen, as in fair_dispatch.lua);
--   * the line's first tasks that asynq keeps parked are granted while the
--     queue has room, each recorded in run and grants as fair_dispatch.lua
--     records one (so that a repair pass can judge it); one whose producer
--     has yet to write it goes to the back of the line.
-- No tags, weights, caps, keys, pauses, records or charges. A floor for
-- the cost of fair dispatch, not a rule.
local member, ttl, most = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
heartbeat(member, ttl)
local line = P .. 'lean'

local a, later = 7, {}
for i = 1, tonumber(ARGV[6]) do
  local id, done = ARGV[a], ARGV[a + 2] == '1'
  if done and call('HGET', TP .. id, 'state') == 'active' then
    later[#later + 1] = i -- asynq has yet to mark it done
  elseif done then
    call('HDEL', run, id)
    call('ZREM', fresh, id) -- it went straight in, and is done already
  end
  a = a + 8
end

local moves = tonumber(ARGV[a])
a = a + 1
for _ = 1, moves do
  local op, id = ARGV[a], ARGV[a + 1]
  a = a + (op == FRONT and 4 or 3)
  local r = call('HGET', run, id)
  if r and string.sub(r, 1, 1) == 'g' then
    local e = op == BACK and call('HGET', grants, id)
    call('HDEL', grants, id)
    if e then
      local _, _, _, T = runEntry(r)
      call('LPUSH', line, T .. '\n' .. e)
      call('HDEL', run, id)
    elseif (op == GO or op == FRONT) and call('HGET', TP .. id, 'state') == 'scheduled'
        and call('ZREM', scheduled, id) == 1 then
      call(op == FRONT and 'RPUSH' or 'LPUSH', pending, id)
      call('HSET', TP .. id, 'state', 'pending', 'pending_since', int(now * 1000))
      call('HSET', run, id, 'p' .. string.sub(r, 2))
    else
      call('HDEL', run, id) -- freed, or gone from asynq meanwhile
    end
  end
end

seen() -- tasks that went straight in and are in asynq now leave fresh

local out, live = {0}, 0
if most > 0 then
  local _, fair, total = capacity()
  live = total
  local n = 0
  for _ = 1, math.min(most, room(fair, total)) do
    local m = call('LPOP', line)
    if not m then
      break
    end
    local T, e = string.match(m, '^([^\n]*)\n(.*)$')
    local id = entryID(e)
    if id and call('HGET', TP .. id, 'state') == 'scheduled' then
      call('HSET', run, id, 'g|0|' .. nowS .. '|' .. T)
      call('HSET', grants, id, e)
      n = n + 1
      out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = T, e, '0', ''
    else
      call('RPUSH', line, m) -- its producer has yet to write it: later
    end
  end
  out[1] = n
end
return endTurn(out, call('LLEN', line), 0, live, {}, later)
