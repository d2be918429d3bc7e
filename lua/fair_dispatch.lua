-- fair_dispatch.lua: a gate worker's turn for one queue: its heartbeat,
-- the tasks it finished, the moves of its last turn's grants, then grants
-- while the queue has space (and, once full, to tenants owed a place, see
-- pick). One call a turn: a grant is moved in by the
-- next turn, which the worker runs at once. Runs after fair.lua (KEYS and
-- the first two ARGV are its).
--
-- ARGV[3]  the worker's member "<id>|<concurrency>|<fair 0/1>"
-- ARGV[4]  the member's expiry µs from now (0: leave the queue; the member
--          then lapses now, and still holds the queue dispatched for
--          RESTART_GRACE)
-- ARGV[5]  most grants to make
-- ARGV[6]  n, then n eights: task ID, run time µs, done (1: the task left
--          asynq's hands or will, 0: it will be retried), its tenant's
--          MaxInFlight, weight in thousandths and paused (1 or 0) now (cap
--          -1: unknown, keep what is stored), how long to hold the
--          tenant's waiting tasks, µs (0: not at all; worker.Throttled),
--          and a key to hold instead of the tenant ("" for none;
--          worker.ThrottledKey)
-- then     m, then m move ops, as fair_move.lua takes them: the previous
--          turn's grants, admitted since, go in (or back) here
-- then     k, then k quads: tenant, MaxInFlight, weight in thousandths,
--          paused: tenants' quotas as they are now (a pause or a resume)
-- then     j, then j triples: key, MaxInFlight, paused: keys' quotas now
-- then     r, then r task IDs: tasks the caller admitted already (ready),
--          which go in with this turn if it grants them (behind any of
--          their tenants' grants that are not ready)
-- Returns  {n, then n quads tenant, waiting entry granted (state g: the
--          caller admits and moves them), front ("1": move it in at the
--          front of the queue, else "c" for a capped tenant's and "0";
--          "m": a ready task, moved in already; "x": a ready task that
--          asynq no longer keeps parked, freed) and the task to go behind
--          there ("": none), tenants waiting, the earliest µs
--          a sleeping tenant wakes or an entry in limbo is due (0: none),
--          the tasks in asynq's pending list, the live gate workers'
--          concurrency (0 when it makes no grants), u, then u pairs
--          tenant, waiting entry: the entries next in the lines of the
--          capped tenants granted (nextUp), then the indexes (from
--          1) of the finishes to hand in again: done, but asynq has yet to
--          take the task out of its active list}
--
-- A finished task's tenant is charged what it ran, less the estimate it
-- was charged at its grant; a task to be retried keeps its place in run
-- (it is still the tenant's, so a cap stays hard) and is charged in full
-- when it runs again. A finished task that asynq keeps parked again (Redis
-- came back from a snapshot taken between its grant and its move) goes
-- back to the head of its tenant's line.
local member, ttl, most = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
heartbeat(member, ttl)

-- The records of the tenants whose tasks a turn hands in, read once and
-- written once a turn (flush), however many of each tenant's tasks it
-- hands in.
local recs, order = {}, {}

-- record returns tenant T's record as this turn's finishes left it.
local function record(T)
  local c = recs[T]
  if not c then
    local h = call('HMGET', P .. 't:' .. T, 'tag', 'wm', 'est', 'used', 'n', 'cap', 'paused', 'l', 'wk', 'lg', 'bh', 'ow')
    c = {tag = toint(h[1]), wm = toint(h[2]), est = toint(h[3]), used = toint(h[4]), n = toint(h[5]),
      cap = toint(h[6]), paused = h[7] or '0', wasPaused = h[7] == '1', l = toint(h[8]), wk = h[9],
      lg = toint(h[10]), bh = h[11] == '1', ow = toint(h[12]), left = false, asleep = false}
    recs[T] = c
    order[#order + 1] = T
  end
  return c
end

-- flush writes tenant T's record as this turn's finishes left it and
-- places T (into w's batches, when given: place); it returns how many
-- tasks T has waiting.
local function flush(T, w)
  local c = recs[T]
  if c.paused ~= '1' and c.wasPaused then
    call('SREM', held, T)
    c.wasPaused = false
  end
  local waiting = waitingOf(T, c.wk or 0)
  if waiting == 0 then
    c.ow = 0 -- nothing of it waits: no place is owed
  end
  call('HSET', P .. 't:' .. T, 'tag', c.tag, 'est', c.est, 'used', c.used, 'n', c.n,
    'cap', c.cap, 'wm', c.wm, 'paused', c.paused, 'ow', c.ow)
  place(T, c.tag, c.n, c.cap, c.paused, waiting, c.asleep or nil, lent(c.cap, c.n, c.lg, c.est, c.wm), w)
  return waiting
end

-- The finishes' run entries, by task ID, read with one HMGET and kept in
-- step with the finishes' writes, and the one HDEL of run of the tasks
-- that leave it, the one of grants of those granted from a line, the one
-- of their deadlines and the one ZREM of their IDs' records (own, when it
-- has any), sent when the finishes are in (nothing before reads them).
local entries, leaving, ungranted, undated, unowned -- read below, before the finishes

-- finish hands in task id, which ran for ran µs: its place and its keys'
-- at once, its tenant's record in flush.
local function finish(id, ran, done, cap, wm, paused, hold, key)
  local r = entries[id]
  if not r then
    return true
  end
  local state = done and call('HGET', TP .. id, 'state')
  if state == 'active' then
    return false -- asynq has still to mark it done: its place stays taken
  end
  local s, est, since, T, f = runEntry(r)
  local c = record(T)
  if cap >= 0 then
    c.cap, c.wm, c.paused = cap, wm, paused
  end
  if hold > 0 and key ~= '' then
    holdKey(key, hold)
  elseif hold > 0 then
    local wake = now + hold
    if toint(call('ZSCORE', sleep, T)) < wake then
      lull(T, wake)
    end
    c.asleep = true
  end
  c.est = c.est == 0 and ran or smooth(c.est, ran, TENANT_SMOOTHING)
  c.tag = c.tag + charge(ran - est, c.wm)
  c.used = c.used + ran
  qest = qest == 0 and ran or smooth(qest, ran, QUEUE_SMOOTHING)
  local rollback = state == 'scheduled' and isParked(id)
  local leaves = rollback or (done and state ~= 'retry' and state ~= 'pending' and state ~= 'scheduled')
  if leaves then
    if not rollback and c.cap > 0 and c.n + c.ow >= c.cap and (c.tag < floor or c.bh) then
      c.ow = math.min(c.ow + 1, c.cap) -- its cap takes the place back
    end
    c.n, c.left = math.max(c.n - 1, 0), true
    entries[id] = false
    add(leaving, id)
    if unowned and not rollback then
      add(unowned, id) -- its ID's record (own) goes with it; a rollback keeps it (requeue)
    end
    if not rollback and hasDeadlines() then
      add(undated, id) -- a rollback waits again, with its deadline
    end
    if s == 'g' then
      add(ungranted, id)
    elseif s == 'f' then
      call('ZREM', fresh, id)
    end
  else
    -- asynq will run it again: it keeps its place
    entries[id] = 'p|0|' .. since .. '|' .. T .. (f == '0' and '' or '\n' .. f)
    call('HSET', run, id, entries[id])
    if s == 'g' then
      add(ungranted, id)
    end
  end
  if rollback then
    -- Redis came back from a snapshot taken before the task's move: asynq
    -- keeps it parked, so it goes back to the head of its tenant's line.
    push(T, f, '0|' .. nowS .. '|0|' .. id, true)
    c.wk = call('HGET', P .. 't:' .. T, 'wk')
  end
  if leaves and f ~= '0' then
    -- its keys' room may let T in: T's record first, as the rule has it
    flush(T)
    if not rollback then
      oweKeys(f)
    end
    leaveKeys(f)
  end
  return true
end

-- settleAll writes the record of each tenant the turn's finishes changed,
-- once, places the tenant, and settles it, knowing the record, when a task
-- of its left. The tenants' places go into the queue's order with one ZADD
-- and one ZREM (each tenant is placed once, and nothing here reads the
-- order), and the busy ones' debts are looked up with one ZMSCORE.
local function settleAll()
  local w = {into = batch('ZADD', vt), out = batch('ZREM', vt)}
  local busy = {}
  for _, T in ipairs(order) do
    local c = recs[T]
    local waiting = flush(T, w)
    if c.left and (c.n > 0 or c.l > 0 or waiting > 0) then
      busy[#busy + 1] = T
    elseif c.left then
      settleRecord(T, false, c.tag, c.paused)
    end
  end
  send(w.into)
  send(w.out)
  persistAll(busy)
end

-- moveReady moves in at once the picks (quads as the reply gives them)
-- whose tasks are ready: the caller admitted them before the turn. Each
-- one's front field becomes "m" when it moved in, or "x" when asynq no
-- longer keeps it parked (its place is freed). A tenant's pick that
-- follows one of its picks that is not ready waits for that one's move,
-- so that the tenant's tasks go in in order.
local function moveReady(picks, ready)
  if next(ready) == nil then
    return
  end
  local ops, at, behind = {}, {}, {}
  for i = 1, #picks, 4 do
    local id = entryID(picks[i + 1])
    if not (id and ready[id]) then
      behind[picks[i]] = true
    elseif not behind[picks[i]] then
      local front = picks[i + 2] == '1'
      ops[#ops + 1] = {op = front and FRONT or GO, id = id, us = tonumber(string.match(picks[i + 1], '^%d+|%d+|(%d+)|')),
        after = front and picks[i + 3]}
      at[id] = i
    end
  end
  if #ops > 0 then
    local into = applyOps(ops)
    for id, i in pairs(at) do
      picks[i + 2] = into[id] and 'm' or 'x'
    end
  end
end

-- nextUp lists, for each capped tenant of picks (whose workers hand off),
-- the entries next in its line (flow "0"), up to NEXT_UP: pairs tenant,
-- entry, in order. The caller admits one of them while asynq marks the
-- tenant's next finished task done (ready).
local NEXT_UP = 4
local function nextUp(picks)
  local out, seen = {}, {}
  for i = 1, #picks, 4 do
    local T = picks[i]
    if not seen[T] and picks[i + 2] ~= '0' then
      seen[T] = true
      for _, e in ipairs(call('LRANGE', P .. 'w:' .. T, 0, NEXT_UP - 1)) do
        out[#out + 1], out[#out + 2] = T, e
      end
    end
  end
  return out
end

local a = 7
local later = {}
local ids = {}
for i = 1, tonumber(ARGV[6]) do
  ids[i] = ARGV[a + 8 * (i - 1)] -- each finish's eight values begin with its ID
end
entries, leaving, ungranted, undated = runEntries(ids), batch('HDEL', run), batch('HDEL', grants), batch('HDEL', deadlines)
unowned = #ids > 0 and hasOwn() and batch('ZREM', own) or nil
for i = 1, tonumber(ARGV[6]) do
  if not finish(ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2] == '1', tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]),
      ARGV[a + 5], tonumber(ARGV[a + 6]), ARGV[a + 7] or '') then
    later[#later + 1] = i
  end
  a = a + 8
end
send(leaving)
send(ungranted)
send(undated)
if unowned then
  send(unowned)
end
settleAll()

local _
_, a = moveOps(a)
a = updates(a)
local ready = {}
for i = 1, tonumber(ARGV[a]) or 0 do -- a caller that gives none
  ready[ARGV[a + i]] = true
end
wake()
recall()
seen()
local out = {0}
local live = 0
local upNext = {}
if most > 0 then
  local _, fair, total = capacity()
  live = total
  local picks = {}
  pick(most, room(fair, total), picks)
  moveReady(picks, ready)
  upNext = nextUp(picks)
  out[1] = #picks / 4
  for i = 1, #picks do
    out[#out + 1] = picks[i]
  end
end
forgive()
save()
local sleeping = has(sleep) and call('ZCARD', sleep) or 0
local due = 0
for _, k in ipairs({sleep, limbo, ksleep}) do
  local first = has(k) and call('ZRANGE', k, 0, 0, 'WITHSCORES') or {}
  if first[2] and (due == 0 or tonumber(first[2]) < due) then
    due = tonumber(first[2])
  end
end
return endTurn(out, call('ZCARD', vt) + sleeping, due, live, upNext, later)
