-- fair_move.lua: moves granted tasks into asynq's queue, or puts them back
-- in line, or lets tasks out of run. Runs after fair.lua (KEYS and the
-- first two ARGV are its).
--
-- ARGV[3]  n, then n triples: op, task ID, µs
--          op "go": the granted task goes in at its slot (the µs; at or
--             before now: pending now, else scheduled for then, and its
--             tenant sleeps until then)
--          op "back": the granted task goes back to the head of its
--             tenant's line, which sleeps for the µs (0: not at all), and
--             its charge is refunded
--          op "free": the task leaves run (the rate refused a task that
--             went straight in, or its write failed)
-- Returns  {tasks moved into the queue}
--
-- A task moves only from state g and only while asynq still keeps it
-- parked (scheduled at ParkedUntil): a task deleted, archived or run from
-- outside meanwhile is never revived, and two movers of one grant move it
-- once. Its asynq.Unique lock, set by asynq until ParkedUntil, gets the
-- task's own TTL from the moment it goes in.
local moved = 0
local a = 4
for _ = 1, tonumber(ARGV[3]) do
  local op, id, us = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  local r = call('HGET', run, id)
  local e = call('HGET', grants, id)
  if op == 'free' then
    if r then
      free(id, r)
    end
  elseif r and e then
    local T = string.match(r, '^%a|[^|]*|[^|]*|(.*)$')
    local uttl = tonumber(string.match(e, '^%d+|%d+|(%d+)|'))
    local tk = TP .. id
    if op == 'back' then
      call('HDEL', run, id)
      call('HDEL', grants, id)
      local th = P .. 't:' .. T
      local h = call('HMGET', th, 'tag', 'wt')
      local est = tonumber(string.match(r, '^%a|([^|]*)|'))
      call('HSET', th, 'tag', fmt(num(h[1], 0) - est / num(h[2], 1)))
      if call('HINCRBY', th, 'n', -1) < 0 then
        call('HSET', th, 'n', 0)
      end
      call('LPUSH', P .. 'w:' .. T, e)
      if us > 0 then
        call('ZADD', sleep, fmt(now + us), T)
      end
      eligible(T)
    elseif call('HGET', tk, 'state') == 'scheduled' and num(call('ZSCORE', scheduled, id), 0) == PARKED then
      local lock = call('HGET', tk, 'unique_key')
      if us <= now then
        call('ZREM', scheduled, id)
        call('LPUSH', pending, id)
        call('HSET', tk, 'state', 'pending', 'pending_since', string.format('%.0f', now * 1000))
      else
        call('ZADD', scheduled, math.ceil(us / 1000000), id)
        call('ZREM', vt, T)
        call('ZADD', sleep, fmt(us), T)
      end
      if lock and uttl > 0 and call('GET', lock) == id then
        call('PEXPIREAT', lock, math.floor(math.max(us, now) / 1000) + uttl)
      end
      call('HSET', run, id, 'p' .. string.sub(r, 2))
      call('HDEL', grants, id)
      moved = moved + 1
    else
      free(id, r)
    end
  end
end
return {moved}
