-- fair.lua: the prelude of the dispatcher's scripts (fair_park.lua,
-- fair_dispatch.lua, fair_move.lua, fair_repair.lua). It holds their keys,
-- the start-tag rule and pick. Every key of one asynq queue shares the
-- queue's hash tag {<queue>} with asynq's own keys, so each script is one
-- atomic step on one cluster slot. Package lua puts a shebang before it
-- (#!lua, no flags), so that Redis refuses a script whole under OOM,
-- before it writes anything.
--
-- KEYS[1]  vt: ZSET tenant -> start tag, of the tenants with a task waiting
--          that may go in now (under their cap and not asleep)
-- KEYS[2]  sleep: ZSET tenant -> wake µs, of tenants with tasks waiting that
--          are held back until then (by their rate, or by a task whose
--          producer has still to write it)
-- KEYS[3]  run: HASH task ID -> "state|estimate µs|since µs|tenant", the
--          tasks the dispatcher let in and asynq still holds. State g:
--          granted, being moved by a dispatcher; f: went straight in at
--          park, written by its producer; p: in asynq's hands
-- KEYS[4]  meta: HASH floor (the virtual time: start tag of the latest
--          grant, never lower), est (the queue's mean run time µs, for
--          tenants with none yet)
-- KEYS[5]  workers: ZSET "<id>|<concurrency>|<fair: 0 or 1>" -> expiry µs
-- KEYS[6]  asynq:{<q>}:pending, KEYS[7] asynq:{<q>}:active,
-- KEYS[8]  asynq:{<q>}:scheduled
-- KEYS[9]  grants: HASH task ID -> its waiting entry, for tasks in state g
-- KEYS[10] limbo: ZSET "<tenant>\n<waiting entry>" -> when to look again
--          µs, for entries whose task asynq did not hold at their turn:
--          deleted from outside, or not written yet by a slow producer
-- KEYS[11] fresh: ZSET task ID -> µs, tasks that went straight in (state
--          f) and are not seen in asynq yet: their producers are writing
--          them, so they take space in the queue already
-- ARGV[1]  the dispatcher's key prefix for the queue, <prefix>:fair:{<q>}:
-- ARGV[2]  asynq's task key prefix, asynq:{<q>}:t:
-- Each script's own ARGV starts at ARGV[3].
--
-- Per tenant, in the same slot: P..'w:'..tenant, a LIST of waiting entries
-- "<not-before µs>|<park µs>|<unique TTL ms>|<task ID>" (FIFO), and
-- P..'t:'..tenant, a HASH tag (start tag of its next task), n (tasks in
-- run), cap (MaxInFlight, 0 none), wt (weight), est (run time µs, a moving
-- mean), used (worker time µs charged in total).
local vt, sleep, run, meta, workers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local pending, active, scheduled, grants, limbo, fresh = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11]
local P, TP = ARGV[1], ARGV[2]
local call = redis.call
local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local nowS = string.format('%.0f', now)

-- PARKED is asynq's score of a waiting task: ParkedUntil, in unix seconds.
local PARKED = 253370764800
-- IDLE is how long a tenant's tag outlives its last task: debts (a tag
-- ahead of the floor) are forgiven after that. LIMBO is how long an entry
-- whose task never appears is looked for, in µs.
local IDLE = 3600000
local LIMBO = 3600000000

local function num(s, def)
  return tonumber(s) or def
end

local function fmt(x)
  return string.format('%.17g', x)
end

local floor = num(call('HGET', meta, 'floor'), 0)

-- capacity returns the live workers' total concurrency, and whether one of
-- them is fair, dropping those whose heartbeat lapsed.
local function capacity()
  call('ZREMRANGEBYSCORE', workers, '-inf', '(' .. nowS)
  local total, fair, live = 0, false, false
  for _, m in ipairs(call('ZRANGE', workers, 0, -1)) do
    local c, f = string.match(m, '|(%d+)|([01])$')
    live = true
    if f == '1' then
      fair = true
      total = total + tonumber(c)
    end
  end
  return live, fair, total
end

-- room is how many more tasks may go into the queue: a fair queue holds
-- at most twice its fair workers' concurrency, pending, active, granted or
-- being written.
local function room(fair, total)
  if not fair then
    return math.huge
  end
  local inq = call('LLEN', pending) + call('LLEN', active) + call('HLEN', grants) + call('ZCARD', fresh)
  return 2 * total - inq
end

-- seen takes the tasks that went straight in and are now in asynq out of
-- fresh (they count in asynq's lists from now on).
local function seen()
  for _, id in ipairs(call('ZRANGE', fresh, 0, 63)) do
    if call('EXISTS', TP .. id) == 1 then
      call('ZREM', fresh, id)
    end
  end
end

-- eligible puts tenant T among those that may go in, at the later of its
-- own tag and the floor (an idle or blocked tenant banks no credit), when
-- it has a task waiting, is under its cap and is not asleep; else it takes
-- T out.
local function eligible(T)
  local h = call('HMGET', P .. 't:' .. T, 'tag', 'n', 'cap')
  local cap = num(h[3], 0)
  if call('LLEN', P .. 'w:' .. T) == 0 or call('ZSCORE', sleep, T) or (cap > 0 and num(h[2], 0) >= cap) then
    call('ZREM', vt, T)
  else
    call('ZADD', vt, fmt(math.max(num(h[1], 0), floor)), T)
  end
end

-- doze holds tenant T back until wake µs.
local function doze(T, wake)
  call('ZREM', vt, T)
  call('ZADD', sleep, fmt(wake), T)
end

-- settle forgets an idle tenant's hash after IDLE, and at once when it owes
-- nothing (its tag is behind the floor). A tenant with entries in limbo
-- (field l) is not idle: its cap and weight must outlive them.
local function settle(T)
  local th = P .. 't:' .. T
  local h = call('HMGET', th, 'n', 'l')
  if num(h[1], 0) > 0 or num(h[2], 0) > 0 or call('LLEN', P .. 'w:' .. T) > 0 then
    call('PERSIST', th)
    return
  end
  if num(call('HGET', th, 'tag'), 0) <= floor then
    call('DEL', th)
  else
    call('PEXPIRE', th, IDLE)
  end
end

-- estimate is the run time to charge tenant T's next task at its grant.
local function estimate(th)
  return num(call('HGET', th, 'est'), num(call('HGET', meta, 'est'), 10000))
end

-- grant lets task id (waiting entry e, or nil) of tenant T in: it enters
-- run in state g (with e) or f (without), and is charged its estimate at
-- T's start tag, which moves the floor.
local function grant(T, id, e, tag)
  local th = P .. 't:' .. T
  local est = estimate(th)
  local wt = num(call('HGET', th, 'wt'), 1)
  call('HSET', run, id, (e and 'g' or 'f') .. '|' .. fmt(est) .. '|' .. nowS .. '|' .. T)
  call('HINCRBY', th, 'n', 1)
  floor = math.max(floor, tag)
  call('HSET', th, 'tag', fmt(tag + est / wt))
  call('PERSIST', th)
  if e then
    call('HSET', grants, id, e)
  else
    call('ZADD', fresh, nowS, id)
  end
end

-- free takes task id (run entry r) out of run: its tenant may go in again.
local function free(id, r)
  local T = string.match(r, '^%a|[^|]*|[^|]*|(.*)$')
  call('HDEL', run, id)
  call('HDEL', grants, id)
  call('ZREM', fresh, id)
  local th = P .. 't:' .. T
  if call('HINCRBY', th, 'n', -1) < 0 then
    call('HSET', th, 'n', 0)
  end
  eligible(T)
  settle(T)
end

-- wake makes the tenants whose sleep is over eligible again.
local function wake()
  for _, T in ipairs(call('ZRANGE', sleep, '-inf', now, 'BYSCORE', 'LIMIT', 0, 100)) do
    call('ZREM', sleep, T)
    eligible(T)
  end
end

-- parked reports whether asynq keeps task id parked (scheduled at
-- ParkedUntil) and the dispatcher has not let it in: only such a task
-- may be granted.
local function parked(id)
  return call('HGET', TP .. id, 'state') == 'scheduled'
    and num(call('ZSCORE', scheduled, id), 0) == PARKED and call('HEXISTS', run, id) == 0
end

-- toLimbo sets tenant T's entry e aside until µs at.
local function toLimbo(T, e, at)
  if call('ZADD', limbo, fmt(at), T .. '\n' .. e) == 1 then
    call('HINCRBY', P .. 't:' .. T, 'l', 1)
  end
end

-- fromLimbo takes member m of tenant T out of limbo.
local function fromLimbo(T, m)
  if call('ZREM', limbo, m) == 1 and call('HINCRBY', P .. 't:' .. T, 'l', -1) <= 0 then
    call('HDEL', P .. 't:' .. T, 'l')
  end
end

-- entryID returns a waiting entry's task ID, or nil for one that does not
-- parse.
local function entryID(e)
  return string.match(e, '^%d+|%d+|%d+|(.*)$')
end

-- recall looks again at the entries in limbo that are due: one whose task
-- has appeared parked goes back to the head of its tenant's line; one
-- still missing is looked at again after as long as it has been missing
-- (from 50 ms on), and dropped after LIMBO.
local function recall()
  for _, m in ipairs(call('ZRANGE', limbo, '-inf', nowS, 'BYSCORE', 'LIMIT', 0, 32)) do
    local T, e = string.match(m, '^(.-)\n(.*)$')
    local nb, at, id = string.match(e, '^(%d+)|(%d+)|%d+|(.*)$')
    if not id then
      call('ZREM', limbo, m)
    elseif call('EXISTS', TP .. id) == 1 then
      fromLimbo(T, m)
      if parked(id) then
        call('LPUSH', P .. 'w:' .. T, e)
        eligible(T)
      end
    elseif now - math.max(tonumber(at), tonumber(nb)) > LIMBO then
      fromLimbo(T, m)
      settle(T)
    else
      call('ZADD', limbo, fmt(now + math.max(50000, now - tonumber(at))), m)
    end
  end
end

-- pick grants up to most waiting tasks while the queue has space, the
-- lowest start tag first, appending each as a pair tenant, entry to out.
-- An entry whose task asynq holds but not parked (archived, or run from
-- outside) is dropped; one whose task is missing (deleted, or not written
-- yet) goes to limbo. Neither holds its tenant back.
local function pick(most, space, out)
  local drops = 256 -- entries dropped a call at most: deleted backlogs cost in steps
  while most > 0 and space > 0 and drops > 0 do
    local head = call('ZRANGE', vt, 0, 0, 'WITHSCORES')
    if #head == 0 then
      break
    end
    local T, tag = head[1], tonumber(head[2])
    local w = P .. 'w:' .. T
    local e = call('LPOP', w)
    if not e then
      call('ZREM', vt, T)
      settle(T)
    else
      local id = entryID(e)
      if id and parked(id) then
        grant(T, id, e, tag)
        out[#out + 1], out[#out + 2] = T, e
        most, space = most - 1, space - 1
      else
        drops = drops - 1
        if id and call('EXISTS', TP .. id) == 0 then
          toLimbo(T, e, now + 50000)
        end
      end
      eligible(T)
    end
  end
  call('HSET', meta, 'floor', fmt(floor))
end

-- moveOps applies the n move ops (triples op, task ID, µs) in ARGV from
-- ARGV[a], n first (see fair_move.lua), and returns how many tasks moved
-- into the queue and the ARGV index after the ops.
local function moveOps(a)
  local moved = 0
  local n = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, n do
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
        call('ZREM', scheduled, id)
        call('LPUSH', pending, id)
        call('HSET', tk, 'state', 'pending', 'pending_since', string.format('%.0f', now * 1000))
        if lock and uttl > 0 and call('GET', lock) == id then
          call('PEXPIRE', lock, uttl)
        end
        call('HSET', run, id, 'p' .. string.sub(r, 2))
        call('HDEL', grants, id)
        moved = moved + 1
      else
        free(id, r)
      end
    end
  end
  return moved, a
end
