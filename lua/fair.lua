-- fair.lua: the prelude of the dispatcher's scripts (fair_park.lua,
-- fair_dispatch.lua, fair_move.lua, fair_repair.lua). It holds their keys,
-- the rule's state and its steps, which mirror package dispatch's Go model
-- (dispatch/internal/rule) one for one: integer virtual time, a tenant's
-- start tag at the later of its tag and the floor, a grant charging the
-- estimate and a finish correcting it with the measured run time. Every
-- key of one asynq queue shares the queue's hash tag {<queue>} with
-- asynq's own keys, so each script is one atomic step on one cluster slot.
-- Package lua puts a shebang before it (#!lua, no flags), so that Redis
-- refuses a script whole under OOM, before it writes anything.
--
-- KEYS[1]  vt: ZSET tenant -> start tag, of the tenants with a task waiting
--          that may go in now (under their cap and awake)
-- KEYS[2]  sleep: ZSET tenant -> wake µs, of tenants with tasks waiting that
--          are held back until then (by their rate)
-- KEYS[3]  run: HASH task ID -> "state|estimate µs|since µs|tenant", the
--          tasks the dispatcher let in and asynq still holds. State g:
--          granted, being moved by a dispatcher; f: went straight in at
--          park, written by its producer; p: in asynq's hands
-- KEYS[4]  meta: HASH floor (the virtual time: start tag of the latest
--          grant, never lower), est (the queue's mean run time µs), cw
--          and cu (the summary of the workers, "<dispatched>|<fair>|<live
--          concurrency>", and until when it holds, µs: capacity)
-- KEYS[5]  workers: ZSET "<id>|<concurrency>|<fair: 0 or 1>|<restart grace
--          ms>" -> expiry µs; a member that left or lapsed stays its restart
--          grace more (RESTART_GRACE for one without), so that a restart
--          does not open the caps
-- KEYS[6]  asynq:{<q>}:pending, KEYS[7] asynq:{<q>}:active,
-- KEYS[8]  asynq:{<q>}:scheduled
-- KEYS[9]  grants: HASH task ID -> its waiting entry, for tasks in state g
-- KEYS[10] limbo: ZSET "<tenant>\n<waiting entry>" -> when to look again
--          µs, for entries whose task asynq did not hold at their turn:
--          deleted from outside, or not written yet by its producer
-- KEYS[11] fresh: ZSET task ID -> µs, tasks that went straight in (state
--          f) and are not seen in asynq yet: their producers are writing
--          them, so they take space in the queue already
-- KEYS[12] debts: ZSET tenant -> µs, idle tenants whose tag is ahead of
--          the floor, forgiven when the queue goes idle
-- KEYS[13] held: SET of paused tenants, for the workers to look up their
--          quotas and resume them
-- KEYS[14] deadlines: HASH task ID -> its asynq.Deadline µs, for tasks
--          that have one, waiting or in run (overdue)
-- KEYS[15] asynq:{<q>}:archived
-- KEYS[16] keys: SET of the concurrency keys that have a record
-- KEYS[17] ksleep: ZSET key -> wake µs, of keys a downstream throttle holds
--          (worker.ThrottledKey)
-- KEYS[18] kw: ZSET key -> 0, of the keys that have tenants registered
-- KEYS[19] kheld: SET of paused keys, for the workers to look up their
--          quotas and resume them
-- ARGV[1]  the dispatcher's key prefix for the queue, <prefix>:fair:{<q>}:
-- ARGV[2]  asynq's task key prefix, asynq:{<q>}:t:
-- Each script's own ARGV starts at ARGV[3].
--
-- A tenant's waiting tasks are in flows: those of one priority carrying
-- the same concurrency keys, named as package rule's FlowID does ("0" for
-- priority 0 and no keys; else the priority, then a tab before each key).
-- Per tenant, in the same slot: P..'w:'..tenant, the LIST of waiting
-- entries "<not-before µs>|<park µs>|<unique TTL ms>|<task ID>" of flow
-- "0" (FIFO), and P..'w:'..tenant..'\n'..flow that of each other flow;
-- P..'f:'..tenant, a ZSET of the other flows with tasks waiting, scored by
-- minus their priority, member "<head's park µs, 16 digits>|<flow>" (so a
-- tenant's flows sort as its tasks go: higher priority, then older head);
-- and P..'t:'..tenant, a HASH tag (start tag of its next task), n (tasks
-- in run), cap (MaxInFlight, 0 none), wm (weight in thousandths), est (run
-- time µs, a moving mean), used (worker time µs charged in total), l
-- (entries in limbo), paused (1: Quota.Paused holds its waiting tasks), wk
-- (tasks waiting in flows other than "0"), mv (its task granted last).
--
-- P..'own', a ZSET task ID -> park µs, holds the latest waiting entry's
-- park time of each task ID its producer gave (asynq.TaskID): an ID that
-- left asynq behind the dispatcher's back (deleted, or run from outside
-- and done) may be enqueued again, and an older entry of it, still in a
-- line or in limbo, is then stale: it must not let the new task in at its
-- turn, under its tenant, flow and time. Entries of IDs Enqueue made have
-- no record: no one else can give their ID.
--
-- Per concurrency key: P..'k:'..key, a HASH n (its tasks in run), cap
-- (MaxInFlight, 0 none), paused (1 or 0), w (its tasks waiting), ow
-- (places its cap took back that grants have yet to fill); and
-- P..'kb:'..key, a ZSET tenant -> start tag of the tenants whose every
-- flow waits on a closed key and that registered with this one.
--
-- The prelude only declares: begin sets its per-call state (the keys, the
-- time, the queue's floor) at the start of every call. So the same source
-- serves as a Redis Functions library, whose functions are defined once
-- when it loads (package lua's FairLibrary), and as a script per call
-- (EVALSHA) where functions are not available.
local KEYS, ARGV
local vt, sleep, run, meta, workers
local pending, active, scheduled
local grants, limbo, fresh, debts, held
local deadlines, archived, keys, ksleep, kw, kheld
local P, TP, own
local call
local now, nowS, nowNs

-- The rule's constants, as package rule declares them (a test compares).
local WEIGHT_SCALE = 1000
local DEFAULT_ESTIMATE = 10000
local TENANT_SMOOTHING = 4
local QUEUE_SMOOTHING = 16
local LOAN_CHARGES = 2
-- PARKED is asynq's score of a waiting task: ParkedUntil, in unix seconds.
local PARKED = 253370764800
-- IDLE is how long an idle tenant's debt (a tag ahead of the floor)
-- outlives it in ms unless the queue goes idle first. LIMBO is how long an
-- entry whose task never appears is looked for, in µs. FRESH_GRACE is how
-- long a straight-in task's producer has to write it, in µs.
local IDLE = 3600000
local LIMBO = 3600000000
local FRESH_GRACE = 1000000
-- RESTART_GRACE is how long, in µs, a queue stays dispatched after its
-- last worker with a gate left, so that a restart does not open the caps,
-- for a worker's record that names no grace of its own. SUMMARY_FOR is
-- the longest, in µs, a call trusts the summary of the workers another
-- call left (capacity): a worker that joins or leaves without a turn of
-- this version (an older worker of a mixed fleet) counts within it.
local RESTART_GRACE = 30000000
local SUMMARY_FOR = 1000000
-- PICK_BUDGET is how many waiting entries a turn may drop, or tenants it
-- may find waiting on keys, before it stops.
local PICK_BUDGET = 256
-- SWEEP_KEYS is how many keys with tenants registered a turn looks at
-- when no tenant may go in.
local SWEEP_KEYS = 64

-- int writes whole number x as text, for text the script builds: '%d',
-- which Redis's Lua formats through a C long (64 bits on a 64-bit build),
-- is exact below 2^63 and costs half what '%.0f' does, where Lua's own
-- conversion keeps 14 digits. An argument of redis.call needs none below
-- 10^17: Redis writes a number as '%.17g' does (as an integer from 7.2
-- on), digits alone, and a call costs less without the format.
local function int(x)
  return string.format('%d', x)
end

-- toint reads a stored number (0 when missing), whole: x - x % 1 is
-- math.floor(x) without the call.
local function toint(s)
  local x = tonumber(s) or 0
  return x - x % 1
end

-- charge is the virtual time x µs of work costs a tenant of weight wm in
-- thousandths (0 or less, none stored: a weight of 1).
local function charge(x, wm)
  return math.floor(x * WEIGHT_SCALE / (wm > 0 and wm or WEIGHT_SCALE))
end

-- smooth moves mean m a 1/div part of the way to x.
local function smooth(m, x, div)
  return m + math.floor((x - m) / div)
end

-- pad writes µs as 16 digits, so that it sorts as text.
local function pad(us)
  local s = int(us)
  return string.rep('0', 16 - #s) .. s
end

-- entryAt reads a waiting entry's park µs.
local function entryAt(e)
  return tonumber(string.match(e, '^%d+|(%d+)|')) or 0
end

-- OWN_FOR is how long, in µs, an ID's record in own outlives a leak: a
-- record goes when its task leaves run or is archived, and one whose task
-- an operator deleted while it waited is dropped after this long.
local OWN_FOR = 86400000000

-- anyOwn says whether own may have members, once a call has asked (hasOwn).
local anyOwn
local function hasOwn()
  if anyOwn == nil then
    anyOwn = call('EXISTS', own) == 1
  end
  return anyOwn
end

-- owned records waiting entry e's park µs as the latest of its task ID id.
local function owned(id, e)
  anyOwn = true
  call('ZADD', own, entryAt(e), id)
end

-- stale reports whether waiting entry e of task id is older than the
-- latest entry of its ID (see own): the ID was enqueued again after e's
-- task left asynq. An entry as new or newer passes: the latest itself, one
-- a rollback put back (requeue), or one an older version's park wrote
-- beside a record it could not know.
local function stale(id, e)
  if not hasOwn() then
    return false
  end
  local at = call('ZSCORE', own, id)
  return at ~= false and entryAt(e) < toint(at)
end

-- disown forgets task id's record once its task left asynq's hands or its
-- last entry is dropped: an older entry of the ID finds no task to let in.
local function disown(id)
  if hasOwn() then
    call('ZREM', own, id)
  end
end

-- flowKeys lists the keys of flow f (NO_KEYS, shared, for a flow without
-- any; FLOW0 lists flow "0" alone); flowPrio reads its priority.
local NO_KEYS, FLOW0 = {}, {'0'}
local function flowKeys(f)
  if f == '0' or not string.find(f, '\t', 1, true) then
    return NO_KEYS
  end
  local ks = {}
  for k in string.gmatch(f, '\t([^\t]+)') do
    ks[#ks + 1] = k
  end
  return ks
end

local function flowPrio(f)
  return tonumber(string.match(f, '^(%-?%d+)')) or 0
end

-- line is the LIST of tenant T's flow f.
local function line(T, f)
  if f == '0' then
    return P .. 'w:' .. T
  end
  return P .. 'w:' .. T .. '\n' .. f
end

-- flowMember is flow f's member in its tenant's ZSET of flows, by its
-- head e.
local function flowMember(e, f)
  return pad(entryAt(e)) .. '|' .. f
end

-- waitingOf is how many tasks tenant T has waiting; wk is its record's wk
-- when the caller read it (nil: read it).
local function waitingOf(T, wk)
  return call('LLEN', P .. 'w:' .. T) + toint(wk or call('HGET', P .. 't:' .. T, 'wk'))
end

-- flowsOf lists tenant T's flows with tasks waiting, in the order its
-- tasks go: higher priority, then older head, then name.
local function flowsOf(T)
  local fs = {}
  local d = call('LINDEX', P .. 'w:' .. T, 0)
  local dm = d and flowMember(d, '0')
  local zs = call('ZRANGE', P .. 'f:' .. T, 0, -1, 'WITHSCORES')
  for i = 1, #zs, 2 do
    local m, score = zs[i], tonumber(zs[i + 1])
    if dm and (score > 0 or (score == 0 and m > dm)) then
      fs[#fs + 1], dm = '0', nil
    end
    fs[#fs + 1] = string.match(m, '^%d+|(.*)$')
  end
  if dm then
    fs[#fs + 1] = '0'
  end
  return fs
end

-- filled says which of the sets sleep, limbo and ksleep may have members:
-- one EXISTS of all three, at a call's first question, finds most turns
-- with all of them empty, and then none of them is read. A call that adds
-- to one marks it (fill).
local filled

-- has reports whether set k (sleep, limbo or ksleep) may have members.
local function has(k)
  if not filled then
    local any = call('EXISTS', sleep, limbo, ksleep) > 0
    filled = {[sleep] = any, [limbo] = any, [ksleep] = any}
  end
  return filled[k]
end

-- fill marks set k as having members, before an add.
local function fill(k)
  has(k)
  filled[k] = true
end

-- A batch gathers the fields or members that one command writes to one
-- key over many tasks, to send them as one command: a move of a turn's
-- grants takes them out of the scheduled set with one ZREM, not one a
-- task. Nothing the call reads before send may depend on them. A batch
-- is sent whenever it holds BATCH_MOST values, for unpack and the Lua
-- stack take a few thousand at most.
local BATCH_MOST = 1000

local function batch(cmd, key)
  return {cmd, key}
end

-- send sends batch b, if it holds anything, and empties it.
local function send(b)
  if #b > 2 then
    call(unpack(b))
    for i = #b, 3, -1 do
      b[i] = nil
    end
  end
end

-- add appends value v (a member or field), and w after it when given
-- (its score or value), to batch b.
local function add(b, v, w)
  local n = #b + 1
  b[n] = v
  if w ~= nil then
    n = n + 1
    b[n] = w
  end
  if n >= BATCH_MOST then
    send(b)
  end
end

-- readAll runs read command cmd (HMGET, ZMSCORE) on key for each of
-- names, BATCH_MOST at a time, and returns the answers in their order.
local function readAll(cmd, key, names)
  local out = {}
  for i = 1, #names, BATCH_MOST do
    local part = call(cmd, key, unpack(names, i, math.min(i + BATCH_MOST - 1, #names)))
    for j = 1, #part do
      out[i + j - 1] = part[j]
    end
  end
  return out
end

-- The keys' records, read once a call and kept in step with each write.
local keyCache

-- keyState returns key K's record: n, cap, paused, w, ow, asleep.
local function keyState(K)
  local k = keyCache[K]
  if not k then
    local h = call('HMGET', P .. 'k:' .. K, 'n', 'cap', 'paused', 'w', 'ow')
    k = {n = toint(h[1]), cap = toint(h[2]), paused = h[3] == '1', w = toint(h[4]), ow = toint(h[5]),
      asleep = has(ksleep) and call('ZSCORE', ksleep, K) ~= false, exists = (h[1] or h[2] or h[3] or h[4]) ~= false}
    keyCache[K] = k
  end
  return k
end

-- keyOpen reports whether a task carrying key K may go in now.
local function keyOpen(K)
  local k = keyState(K)
  return not k.paused and not k.asleep and (k.cap == 0 or k.n < k.cap)
end

-- flowOpen reports whether every key of flow f is open.
local function flowOpen(f)
  for _, K in ipairs(flowKeys(f)) do
    if not keyOpen(K) then
      return false
    end
  end
  return true
end

-- keyAdd adds d to field (n, w or ow) of key K's record, never below 0.
local function keyAdd(K, field, d)
  local k = keyState(K)
  local v = math.max(k[field] + d, 0)
  k[field] = v
  call('HSET', P .. 'k:' .. K, field, v)
  if not k.exists then
    k.exists = true
    call('SADD', keys, K)
  end
end

-- settleKey forgets key K once nothing of it waits, runs or is held.
local function settleKey(K)
  local k = keyState(K)
  if k.exists and k.n == 0 and k.w == 0 and not k.asleep then
    call('DEL', P .. 'k:' .. K, P .. 'kb:' .. K)
    call('SREM', keys, K)
    call('ZREM', kw, K)
    call('SREM', kheld, K)
    keyCache[K] = {n = 0, cap = 0, paused = false, w = 0, ow = 0, asleep = false, exists = false}
  end
end

-- reindex moves tenant T's flow f (other than "0") in its ZSET of flows
-- from its old head (nil: none) to its new one (nil: empty).
local function reindex(T, f, old, new)
  local fl = P .. 'f:' .. T
  if old then
    call('ZREM', fl, flowMember(old, f))
  end
  if new then
    call('ZADD', fl, -flowPrio(f), flowMember(new, f))
  end
end

-- count adds d to the tasks waiting in tenant T's flow f (other than "0"):
-- the tenant's wk and each key's w.
local function count(T, f, d)
  local th = P .. 't:' .. T
  if call('HINCRBY', th, 'wk', d) <= 0 then
    call('HDEL', th, 'wk')
  end
  for _, K in ipairs(flowKeys(f)) do
    keyAdd(K, 'w', d)
  end
end

-- push puts waiting entry e of tenant T at the end of its flow f, or at
-- its head.
local function push(T, f, e, head)
  local l = line(T, f)
  if f == '0' then
    call(head and 'LPUSH' or 'RPUSH', l, e)
    return
  end
  if head then
    local old = call('LINDEX', l, 0)
    call('LPUSH', l, e)
    reindex(T, f, old, e)
  elseif call('RPUSH', l, e) == 1 then
    reindex(T, f, nil, e)
  end
  count(T, f, 1)
end

-- unlisted finishes taking waiting entry e out of tenant T's flow f
-- other than "0": its head was e when wasHead.
local function unlisted(T, f, e, wasHead)
  if wasHead then
    reindex(T, f, e, call('LINDEX', line(T, f), 0))
  end
  count(T, f, -1)
end

-- pop takes the head of tenant T's flow f (nil when it is empty).
local function pop(T, f)
  local e = call('LPOP', line(T, f))
  if e and f ~= '0' then
    unlisted(T, f, e, true)
  end
  return e
end

-- floor and qest are the queue's floor and estimate, read by begin.
local floor, qest

-- estimate is the run time µs charged a task of a tenant whose stored
-- estimate is est: est, or the queue's (qest) while the tenant has none,
-- or DEFAULT_ESTIMATE while neither has.
local function estimate(est)
  if est ~= 0 then
    return est
  end
  return qest > 0 and qest or DEFAULT_ESTIMATE
end

-- save writes the queue's floor and estimate back.
local function save()
  call('HSET', meta, 'floor', floor, 'est', qest)
end

-- The summary of the queue's workers (capacity's answer) that a call
-- found in meta, read by begin: sumUntil is until when it holds (0: there
-- is none, or it no longer holds).
local sumRecent, sumFair, sumTotal, sumUntil

-- capacity reads the queue's workers with a gate: whether any served it
-- within its restart grace (dispatched), whether one of them is fair, and
-- the live ones' total concurrency, fair or not (every gate worker adds
-- room). It drops the records whose grace is over. It keeps its answer in
-- meta, "cw" ("<recent>|<fair>|<total>", 1 or 0 for yes or no) and "cu"
-- (until when it holds, µs): until a live record would lapse or a lapsed
-- one's grace end, and at most SUMMARY_FOR. A call takes the answer from
-- there while it holds, unless asked to read the workers (fresh): a turn
-- whose worker joins, comes back, leaves or shortens its record's life
-- is. So a park reads the fleet's records only when the answer ran out,
-- about once a second.
local function capacity(fresh)
  if not fresh and sumUntil > now then
    return sumRecent, sumFair, sumTotal
  end
  local recent, fair, total, till = false, false, 0, now + SUMMARY_FOR
  local ms = call('ZRANGE', workers, 0, -1, 'WITHSCORES')
  for i = 1, #ms, 2 do
    local c, f, g = string.match(ms[i], '|(%d+)|([01])|(%d+)$')
    if not c then
      c, f = string.match(ms[i], '|(%d+)|([01])$')
    end
    local expiry = tonumber(ms[i + 1])
    local grace = g and tonumber(g) * 1000 or RESTART_GRACE
    if not c or expiry + grace < now then
      call('ZREM', workers, ms[i])
    else
      recent = true
      fair = fair or f == '1'
      if expiry >= now then
        total = total + tonumber(c)
        till = math.min(till, expiry + 1)
      else
        till = math.min(till, expiry + grace + 1)
      end
    end
  end
  sumRecent, sumFair, sumTotal, sumUntil = recent, fair, total, till
  call('HSET', meta, 'cw', (recent and '1|' or '0|') .. (fair and '1|' or '0|') .. total, 'cu', till)
  return recent, fair, total
end

-- heartbeat records worker member's record as live for ttl µs more (0 or
-- less: it leaves now). A worker that joins, comes back after its record
-- lapsed, leaves, or shortens its record's life changes the summary of
-- the workers, so then capacity reads them at once.
local function heartbeat(member, ttl)
  local was = toint(call('ZSCORE', workers, member))
  local expiry = now + math.max(ttl, 0)
  call('ZADD', workers, expiry, member)
  if was < now or expiry < was then
    capacity(true)
  end
end

-- queued is the length of asynq's pending list, read once a call at its
-- first pendingLen: a call that moves tasks into the list (a turn's moves)
-- moves them all before that, and its grants go in with the next turn.
-- freshLeft is how many tasks fresh holds once seen has looked at it, when
-- seen could tell (nil: read it).
local queued, freshLeft

local function pendingLen()
  queued = queued or call('LLEN', pending)
  return queued
end

-- room is how many more tasks may go into the queue (package rule's Room):
-- a fair queue holds its live gate workers' concurrency and half as much
-- again (at least 2), pending, active, granted or being written, so a
-- grant waits behind at most half a round of work.
local function room(fair, total)
  if not fair then
    return math.huge
  end
  local inq = pendingLen() + call('LLEN', active) + call('HLEN', grants) + (freshLeft or call('ZCARD', fresh))
  return total + math.max(2, math.floor(total / 2)) - inq
end

-- owes reports whether any idle tenant of the queue owes worker time
-- (debts is not empty): only then may a record carry an expiry to lift.
local owing
local function owes()
  if owing == nil then
    owing = call('ZCARD', debts) > 0
  end
  return owing
end

-- asleep reports whether tenant T sleeps (its rate holds it back).
local function asleep(T)
  return has(sleep) and call('ZSCORE', sleep, T) ~= false
end

-- lull puts tenant T to sleep until wake µs.
local function lull(T, wake)
  fill(sleep)
  call('ZADD', sleep, wake, T)
end

-- readBy runs read command cmd (HMGET, ZMSCORE) on key for each of names
-- (readAll) and returns the answers by name (false: none).
local function readBy(cmd, key, names)
  local out = {}
  if #names > 0 then
    local rs = readAll(cmd, key, names)
    for i = #names, 1, -1 do
      out[names[i]] = rs[i]
    end
  end
  return out
end

-- runEntries returns the run entries of tasks ids (false: none), by ID,
-- read with one HMGET.
local function runEntries(ids)
  return readBy('HMGET', run, ids)
end

-- lift makes record th of tenant T, which owes, permanent again and
-- takes T out of debts.
local function lift(th, T)
  call('PERSIST', th)
  call('ZREM', debts, T)
end

-- persist makes record th of tenant T permanent again, as one with tasks
-- waiting or in flight must be. A record expires only while T owes (is in
-- debts), so only then is there anything to do.
local function persist(th, T)
  if owes() and call('ZSCORE', debts, T) then
    lift(th, T)
  end
end

-- persistAll is persist for each of tenants ts, whose records it names,
-- with one ZMSCORE of debts.
local function persistAll(ts)
  if #ts == 0 or not owes() then
    return
  end
  local scores = readAll('ZMSCORE', debts, ts)
  for i, T in ipairs(ts) do
    if scores[i] then
      lift(P .. 't:' .. T, T)
    end
  end
end

-- lent is package rule's Lent: how far ahead of the floor the tag of a
-- tenant with cap, n tasks in flight, lag lg (what the floor gained on it
-- that its grants from its line have yet to give back), estimate est and
-- weight wm (0: none yet) may be while its next task still starts at the
-- floor.
local function lent(cap, n, lg, est, wm)
  if cap <= 0 or n <= 0 or lg <= 0 then
    return 0
  end
  return math.min(lg, LOAN_CHARGES * math.max(charge(estimate(est), wm), 1))
end

-- startAt is package rule's Queue.start: the start tag of the next task
-- of a tenant with tag tag that is lent lend (lent; nil: nothing), the
-- later of the two and the floor (an idle or blocked tenant banks no
-- credit).
local function startAt(tag, lend)
  return math.max(tag - (lend or 0), floor)
end

-- place puts tenant T among those that may go in, at the later of its own
-- tag, less what it is lent, and the floor (an idle or blocked tenant banks
-- no credit), when it has a task waiting, is under its cap, awake and not
-- paused; else it takes T out. The caller gives what it knows of T: its
-- tag, tasks in flight n, cap and paused ("1"), and, when it knows them,
-- how many tasks wait and whether it sleeps (nil: read them), and what it
-- is lent (lent; nil: nothing); with w, the ZADD and ZREM of the order go
-- into its batches into and out, for the caller to send. It reports
-- whether T may go in.
local function place(T, tag, n, cap, paused, waiting, sleeping, lend, w)
  if paused == '1' then
    call('ZREM', vt, T)
    call('SADD', held, T)
  elseif (cap > 0 and n >= cap) or sleeping or (sleeping == nil and asleep(T))
      or (waiting or waitingOf(T)) == 0 then
    if w then
      add(w.out, T)
    else
      call('ZREM', vt, T)
    end
  else
    if w then
      add(w.into, startAt(tag, lend), T)
    else
      call('ZADD', vt, startAt(tag, lend), T)
    end
    return true
  end
  return false
end

-- refresh places tenant T by its record. Every change to a tenant ends
-- with it, or with place.
local function refresh(T)
  local h = call('HMGET', P .. 't:' .. T, 'tag', 'n', 'cap', 'paused', 'wk', 'lg', 'est', 'wm')
  local n, cap = toint(h[2]), toint(h[3])
  return place(T, toint(h[1]), n, cap, h[4], waitingOf(T, h[5] or 0), nil, lent(cap, n, toint(h[6]), toint(h[7]), toint(h[8])))
end

-- uses reports whether tenant T has a flow that carries key K and is
-- open.
local function uses(T, K)
  if call('HEXISTS', P .. 't:' .. T, 'wk') == 0 then
    return false -- only flow "0", which carries no key
  end
  for _, f in ipairs(flowsOf(T)) do
    if string.find(f .. '\t', '\t' .. K .. '\t', 1, true) and flowOpen(f) then
      return true
    end
  end
  return false
end

-- unregister takes tenant T off key K's list.
local function unregister(K, T)
  local kb = P .. 'kb:' .. K
  if call('ZREM', kb, T) == 1 and call('ZCARD', kb) == 0 then
    call('ZREM', kw, K)
  end
end

-- release lets the tenants registered with key K back among those that
-- may go in, lowest start tag first, while K has room: as many as it has
-- places, counting only those that may go in by their own limits with a
-- flow that carries K and is open. The others go back too, and register
-- again with what closes them when their turn finds it.
local function release(K)
  if not keyOpen(K) then
    return
  end
  local k = keyState(K)
  local room = k.cap - k.n
  local kb = P .. 'kb:' .. K
  local popped = false
  while k.cap == 0 or room > 0 do
    local z = call('ZPOPMIN', kb)
    if #z == 0 then
      break
    end
    popped = true
    if refresh(z[1]) and uses(z[1], K) then
      room = room - 1
    end
  end
  if popped and call('ZCARD', kb) == 0 then
    call('ZREM', kw, K)
  end
end

-- sweep releases the tenants registered with open keys (the first
-- SWEEP_KEYS keys with tenants registered, by name) and reports whether
-- any tenant may go in then: a tenant let back for a key that took another
-- of its flows, or reached its own cap, leaves the key's room to the next.
local function sweep()
  for _, K in ipairs(call('ZRANGE', kw, 0, SWEEP_KEYS - 1)) do
    release(K)
  end
  return call('ZCARD', vt) > 0
end

-- block takes tenant T, whose every flow (flows) waits on a closed key,
-- out of those that may go in, and registers it with the first closed key
-- of each flow at start tag start. An open key of those flows gets T off
-- its list and lets in whom it can instead.
local function block(T, start, flows)
  call('ZREM', vt, T)
  for _, f in ipairs(flows) do
    local registered = false
    for _, K in ipairs(flowKeys(f)) do
      if not keyOpen(K) then
        if not registered then
          call('ZADD', P .. 'kb:' .. K, start, T)
          call('ZADD', kw, 0, K)
          registered = true
        end
      else
        unregister(K, T)
        release(K)
      end
    end
  end
end

-- keyFronts is package rule's KeyFronts: whether a grant from a line of
-- flow f at start tag start, of a tenant whose tag is tag, fills a place
-- that the cap of one of f's keys took back (ow): it then goes to the
-- front of the queue, and a full queue takes it.
local function keyFronts(f, start, tag)
  if start == tag then
    return false -- its tenant is not held below its share
  end
  for _, K in ipairs(flowKeys(f)) do
    local k = keyState(K)
    if k.cap > 0 and k.ow > 0 then
      return true
    end
  end
  return false
end

-- oweKeys is package rule's oweKeys: a task of flow f ended, and each of
-- its keys at its cap with tasks waiting on it takes the place back for
-- a grant to fill (ow); a key with nothing waiting is owed nothing.
local function oweKeys(f)
  for _, K in ipairs(flowKeys(f)) do
    local k = keyState(K)
    local ow = k.ow
    if k.w == 0 then
      ow = 0
    elseif k.cap > 0 and k.n + k.ow >= k.cap then
      ow = math.min(k.ow + 1, k.cap)
    end
    if k.exists and ow ~= k.ow then
      keyAdd(K, 'ow', ow - k.ow)
    end
  end
end

-- leaveKeys gives back a place of each key of flow f.
local function leaveKeys(f)
  for _, K in ipairs(flowKeys(f)) do
    keyAdd(K, 'n', -1)
    release(K)
    settleKey(K)
  end
end

-- keyLimits records key K's quota as it is now (cap, paused "1" or "0"),
-- making its record when make is set (else only when it has one), and
-- lets in whom its room allows.
local function keyLimits(K, cap, paused, make)
  local k = keyState(K)
  if not k.exists and not make then
    return
  end
  call('HSET', P .. 'k:' .. K, 'cap', cap, 'paused', paused)
  if paused == '1' then
    call('SADD', kheld, K)
  elseif k.paused then
    call('SREM', kheld, K)
  end
  k.cap, k.paused = tonumber(cap), paused == '1'
  if not k.exists then
    k.exists = true
    call('SADD', keys, K)
  end
  release(K)
end

-- settle forgets an idle tenant's record at once when it owes nothing (its
-- tag is not ahead of the floor), and otherwise when the queue goes idle
-- or after IDLE. A tenant with entries in limbo (field l) is not idle: its
-- cap and weight must outlive them. settleRecord does it for a caller that
-- knows the record: whether T is busy (tasks waiting, in flight or in
-- limbo), its tag, and whether it is paused ("1", "0", nil: not known).
local function settleRecord(T, busy, tag, paused)
  local th = P .. 't:' .. T
  if busy then
    persist(th, T)
  elseif tag <= floor then
    call('DEL', th)
    if owes() then
      call('ZREM', debts, T)
    end
    if paused ~= '0' then
      call('SREM', held, T)
    end
  else
    call('PEXPIRE', th, IDLE)
    call('ZADD', debts, nowS, T)
    owing = true
  end
end

local function settle(T)
  local h = call('HMGET', P .. 't:' .. T, 'n', 'l', 'tag', 'wk')
  settleRecord(T, toint(h[1]) > 0 or toint(h[2]) > 0 or waitingOf(T, h[4] or 0) > 0, toint(h[3]))
end

-- KEPT are the fields of an idle tenant's record that outlive its
-- entries in limbo: its limits, and how many entries it has there.
local KEPT = {'cap', 'wm', 'paused', 'l'}

-- forget makes record th of an idle tenant with entries in limbo hold
-- KEPT alone, as a tenant new to the queue with those limits: it owes
-- nothing and is charged as new (estimate and all) when it comes back,
-- as the rule forgets an idle tenant.
local function forget(th)
  local h = call('HMGET', th, unpack(KEPT))
  call('DEL', th)
  local w = batch('HSET', th)
  for i, f in ipairs(KEPT) do
    if h[i] then
      add(w, f, h[i])
    end
  end
  send(w)
end

-- forgive drops the debts of idle tenants once nothing waits or runs in the
-- queue: with no one to be fair to, a debt only keeps a record. A tenant
-- with entries in limbo (their tasks deleted from outside, or not written
-- yet) and nothing else keeps its limits for them, and is forgotten
-- otherwise, as the rule forgets an idle tenant.
local function forgive()
  if call('HLEN', run) > 0 or call('ZCARD', vt) > 0 or has(sleep) and call('ZCARD', sleep) > 0 then
    return
  end
  for _, T in ipairs(call('ZRANGE', debts, 0, 999)) do
    call('ZREM', debts, T)
    local th = P .. 't:' .. T
    if toint(call('HGET', th, 'l')) == 0 then
      call('DEL', th)
      call('SREM', held, T)
    else
      forget(th)
    end
  end
  local seen = {}
  for _, m in ipairs(has(limbo) and call('ZRANGE', limbo, 0, 999) or {}) do
    local T = string.match(m, '^[^\n]*')
    if not seen[T] then
      seen[T] = true
      local th = P .. 't:' .. T
      local h = call('HMGET', th, 'tag', 'est', 'used', 'mv')
      if (h[1] or h[2] or h[3] or h[4]) and waitingOf(T) == 0 then
        forget(th) -- not forgotten yet
      end
    end
  end
end

-- owed reports whether a tenant with cap (0: none) is owed ow places its
-- cap took back (rule's owed).
local function owed(cap, ow)
  return cap > 0 and ow > 0
end

-- fronts is package rule's Fronts: a grant from the line of a tenant with
-- cap (0: none) and n tasks in flight goes in at the front of the queue
-- when it fills a place the tenant's cap took back (ow of them owed), or
-- when the tenant has tasks in flight and the grant starts away from its
-- tag (lags: at the floor, which the tag lags, or on a loan) or its last
-- grant from its line did (lagged). A benchmark build replaces it
-- (FrontStandIn in package lua).
local function fronts(cap, n, lags, lagged, ow)
  return owed(cap, ow) or cap > 0 and n > 0 and (lags or lagged)
end

-- readRecord reads the fields of tenant T's record that a grant reads
-- and writes: tag, n, wm, est, cap and lg as numbers, wk (nil: none), mv
-- (its task granted last), bh (its last grant from its line started away
-- from its tag) and ow (places its cap took back that its grants have yet
-- to fill).
local function readRecord(T)
  local h = call('HMGET', P .. 't:' .. T, 'tag', 'n', 'wm', 'est', 'cap', 'wk', 'mv', 'bh', 'lg', 'ow')
  return {tag = toint(h[1]), n = toint(h[2]), wm = toint(h[3]), est = toint(h[4]), cap = toint(h[5]),
    wk = h[6], mv = h[7], bh = h[8] == '1', lg = toint(h[9]), ow = toint(h[10])}
end

-- grant lets task id (waiting entry e, or nil; flow f) of tenant T in at
-- start tag start: it enters run in state g (with e) or f (without), or st
-- when given (p: asynq has it already), takes a place of T and of each key
-- of f, and is charged its estimate, which moves the floor. r is T's
-- record as readRecord reads it, when the caller has it (nil: read it);
-- grant updates it. It returns true, whether the task goes in at the
-- front of the queue, and if so behind which of T's tasks ("": none). Only
-- a grant from T's line (state g) goes to the front, and sets r's bh, lg
-- (the lag its grants have yet to give back: rule.Lent) and ow; it leaves writing T's record
-- to its caller (pick, which writes it once a streak; T had a task
-- waiting, so its record is kept already). A task in run already (let in
-- by another entry of its ID) is not granted again: grant then returns
-- nil and changes nothing.
local fronted = {} -- the tasks this turn's pick granted for the front
local granted -- the grants' waiting entries, for one HSET when the pick ends

local function grant(T, id, e, start, st, f, r)
  r = r or readRecord(T)
  local est = estimate(r.est)
  st = st or (e and 'g' or 'f')
  if call('HSETNX', run, id, st .. '|' .. int(est) .. '|' .. nowS .. '|' .. T .. (f == '0' and '' or '\n' .. f)) == 0 then
    return nil -- let in already, by another entry of its ID
  end
  local front, after = false, ''
  if st == 'g' then
    local was = r.tag
    if fronts(r.cap, r.n, start ~= was, r.bh, r.ow) or keyFronts(f, start, was) then
      -- behind T's previous task if that is pending still or goes to the
      -- front in the same move (this turn granted it there), and not
      -- before one that is still to be moved in otherwise
      local along = fronted[r.mv or ''] ~= nil
      local prev = not along and r.mv and call('HGET', TP .. r.mv, 'state')
      front = along or prev ~= 'scheduled'
      after = (along or prev == 'pending') and r.mv or ''
      fronted[id] = front or nil
    end
    local lend = lent(r.cap, r.n, r.lg, r.est, r.wm)
    r.bh, r.lg, r.ow = start ~= was, math.max(floor - (was - lend), 0), math.max(r.ow - 1, 0)
  end
  for _, K in ipairs(flowKeys(f)) do
    if st == 'g' and keyState(K).ow > 0 then
      keyAdd(K, 'ow', -1) -- filled, if one was owed
    end
    keyAdd(K, 'n', 1)
  end
  floor = math.max(floor, start)
  r.tag, r.n, r.mv = start + math.max(charge(est, r.wm), 1), r.n + 1, id
  if st == 'g' then
    add(granted, id, e)
  else
    local th = P .. 't:' .. T
    call('HSET', th, 'n', r.n, 'tag', r.tag, 'mv', id)
    persist(th, T)
    if st == 'f' then
      call('ZADD', fresh, nowS, id)
    end
  end
  return true, front, after
end

-- runEntry splits a run entry "state|estimate|since|tenant", then a
-- newline and its flow unless that is "0", into state, estimate, since,
-- tenant and flow.
local function runEntry(r)
  local s, est, since, T, f = string.match(r, '^(%a)|([^|]*)|([^|]*)|([^\n]*)\n?(.*)$')
  return s, toint(est), since, T, (f == nil or f == '') and '0' or f
end

-- free takes task id (run entry r) out of run: its tenant may go in again.
local function free(id, r)
  local s, _, _, T, f = runEntry(r)
  call('HDEL', run, id)
  call('HDEL', deadlines, id)
  disown(id)
  if s == 'g' then
    call('HDEL', grants, id)
  elseif s == 'f' then
    call('ZREM', fresh, id)
  end
  if call('HINCRBY', P .. 't:' .. T, 'n', -1) < 0 then
    call('HSET', P .. 't:' .. T, 'n', 0)
  end
  refresh(T)
  leaveKeys(f)
  settle(T)
end

-- endTurn ends a turn's reply out, its grants in already, as
-- fair_dispatch.lua's header has it: the tenants waiting, the earliest µs
-- one wakes or an entry in limbo is due (0: none), the tasks in asynq's
-- pending list, the live gate workers' concurrency, then the indexes of
-- the finishes to hand in again (later).
local function endTurn(out, waiting, due, live, next, later)
  out[#out + 1] = waiting
  out[#out + 1] = due
  out[#out + 1] = pendingLen()
  out[#out + 1] = live
  out[#out + 1] = #next / 2
  for _, v in ipairs(next) do
    out[#out + 1] = v
  end
  for _, i in ipairs(later) do
    out[#out + 1] = i
  end
  return out
end

-- seen takes the tasks that went straight in and are now in asynq out of
-- fresh (they count in asynq's lists from now on), and frees the place of
-- one whose producer did not write it within FRESH_GRACE.
local function seen()
  local zs = call('ZRANGE', fresh, 0, 63, 'WITHSCORES')
  local left = #zs / 2
  for i = 1, #zs, 2 do
    local id = zs[i]
    if call('EXISTS', TP .. id) == 1 then
      call('ZREM', fresh, id)
      left = left - 1
    elseif now - tonumber(zs[i + 1]) > FRESH_GRACE then
      local r = call('HGET', run, id)
      if r then
        free(id, r)
      end
      call('ZREM', fresh, id)
      left = left - 1
    end
  end
  if #zs < 128 then
    freshLeft = left -- it read all of fresh
  end
end

-- wake makes the tenants whose sleep is over runnable again, then the
-- keys whose hold is over.
local function wake()
  for _, T in ipairs(has(sleep) and call('ZRANGE', sleep, '-inf', now, 'BYSCORE', 'LIMIT', 0, 100) or {}) do
    call('ZREM', sleep, T)
    refresh(T)
  end
  for _, K in ipairs(has(ksleep) and call('ZRANGE', ksleep, '-inf', now, 'BYSCORE', 'LIMIT', 0, 100) or {}) do
    call('ZREM', ksleep, K)
    keyState(K).asleep = false
    release(K)
    settleKey(K)
  end
end

-- holdKey holds the waiting tasks carrying key K for us µs.
local function holdKey(K, us)
  local k = keyState(K)
  local wake = now + us
  if toint(call('ZSCORE', ksleep, K)) < wake then
    fill(ksleep)
    call('ZADD', ksleep, wake, K)
  end
  k.asleep = true
  if not k.exists then
    k.exists = true
    call('HSET', P .. 'k:' .. K, 'n', k.n)
    call('SADD', keys, K)
  end
end

-- isParked reports whether asynq keeps task id parked (scheduled at
-- ParkedUntil).
local function isParked(id)
  return call('HGET', TP .. id, 'state') == 'scheduled' and toint(call('ZSCORE', scheduled, id)) == PARKED
end

-- parked reports whether asynq keeps task id parked and the dispatcher has
-- not let it in: an entry in limbo whose task is such goes back to its
-- line (recall). pick makes the same test with the score alone and
-- grant's claim of the run entry; the move checks the state.
local function parked(id)
  return isParked(id) and call('HEXISTS', run, id) == 0
end

-- requeue puts task id (run entry r), which asynq keeps parked again after
-- the dispatcher let it in (Redis came back from a snapshot taken before
-- its move), back at the head of its tenant's line and frees its place.
local function requeue(id, r)
  local _, _, _, T, f = runEntry(r)
  local d = call('HGET', deadlines, id) -- it waits again, with its deadline
  local o = hasOwn() and call('ZSCORE', own, id) -- and older entries of its ID stay stale
  push(T, f, '0|' .. nowS .. '|0|' .. id, true)
  free(id, r)
  if d then
    call('HSET', deadlines, id, d)
  end
  if o then
    call('ZADD', own, o, id)
  end
end

-- toLimbo sets tenant T's entry e of flow f aside until µs at. Its member
-- is "<tenant>\n<entry>" for flow "0", else "<tenant>\n\t<flow>\n<entry>".
local function toLimbo(T, e, at, f)
  local m = T .. '\n' .. (f == '0' and '' or '\t' .. f .. '\n') .. e
  fill(limbo)
  if call('ZADD', limbo, at, m) == 1 then
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
-- (from 1 ms on: a producer is usually writing it), and dropped after
-- LIMBO.
local function recall()
  for _, m in ipairs(has(limbo) and call('ZRANGE', limbo, '-inf', nowS, 'BYSCORE', 'LIMIT', 0, 32) or {}) do
    local T, e = string.match(m, '^(.-)\n(.*)$')
    local f = '0'
    if string.sub(e, 1, 1) == '\t' then
      f, e = string.match(e, '^\t([^\n]*)\n(.*)$')
    end
    local nb, at, id = string.match(e, '^(%d+)|(%d+)|%d+|(.*)$')
    if not id then
      call('ZREM', limbo, m)
    elseif stale(id, e) then
      fromLimbo(T, m) -- its ID was enqueued again: the new task has its own entry
      settle(T)
    elseif call('EXISTS', TP .. id) == 1 then
      fromLimbo(T, m)
      if parked(id) then
        push(T, f, e, true)
        refresh(T)
      end
    elseif now - math.max(tonumber(at), tonumber(nb)) > LIMBO then
      fromLimbo(T, m)
      disown(id) -- not stale (above): the ID's record is this entry's
      call('HDEL', deadlines, id)
      settle(T)
    else
      call('ZADD', limbo, now + math.max(1000, now - tonumber(at)), m)
    end
  end
end

-- expired reports whether waiting task id's asynq.Deadline has passed, and
-- then archives it as asynq archives a task (never run: it could only fail
-- with "context deadline exceeded"), so that it takes no place and no turn.
local anyDeadlines
local function hasDeadlines()
  if anyDeadlines == nil then
    anyDeadlines = call('HLEN', deadlines) > 0
  end
  return anyDeadlines
end

local function expired(id)
  if not hasDeadlines() then
    return false
  end
  local d = call('HGET', deadlines, id)
  if not d or tonumber(d) > now then
    return false -- a grant keeps its deadline till it leaves run (overdue)
  end
  call('HDEL', deadlines, id)
  disown(id)
  call('ZREM', scheduled, id)
  call('ZADD', archived, math.floor(now / 1000000), id)
  call('HSET', TP .. id, 'state', 'archived')
  return true
end

-- overdue reports whether task id, in run and in asynq's retry set,
-- is past its asynq.Deadline, and then archives it, as asynq would after
-- its last retry: asynq fails it at every try without running it
-- ("context deadline exceeded"), and it would hold its place meanwhile
-- (a retry keeps it). The caller frees the place.
local function overdue(id)
  local d = hasDeadlines() and call('HGET', deadlines, id)
  if not d or tonumber(d) > now then
    return false
  end
  call('ZREM', string.sub(TP, 1, -3) .. 'retry', id)
  call('ZADD', archived, math.floor(now / 1000000), id)
  call('HSET', TP .. id, 'state', 'archived')
  return true
end

-- LEASE_SKEW is how long, in µs, past its asynq lease an active task is
-- still taken to be running: a worker writes its leases on its own clock.
-- (asynq's recoverer allows 30 s, and looks once a minute.)
local LEASE_SKEW = 10000000

-- lapsed reports whether active task id's lease ran out LEASE_SKEW ago:
-- no worker runs it (it crashed, or Redis came back from a snapshot taken
-- while the task ran, which has ended since), and asynq's recoverer will
-- retry it, so its place is free. A task without a lease has not lapsed.
local function lapsed(id)
  local l = call('ZSCORE', string.sub(TP, 1, -3) .. 'lease', id)
  return l ~= false and tonumber(l) * 1000000 + LEASE_SKEW < now
end

-- WINDOW is the most grants a pick reads the order (vt) for at once: it
-- reads one member more than it may grant, to tell whether it has them
-- all, so 64 members at most.
local WINDOW = 63

-- sortsBefore reports whether tenant a at start tag sa sorts before
-- tenant b at sb in the order, as Redis sorts a ZSET: by score, then by
-- name, byte by byte (Lua's < on strings follows the server's locale).
local function sortsBefore(a, sa, b, sb)
  if sa ~= sb then
    return sa < sb
  end
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- pick grants up to most waiting tasks while the queue has space, and
-- then while the first in order is owed a place its cap took back
-- (rule.Pick), the lowest start tag first, each tenant's first flow whose
-- keys are open, appending each as a quad tenant, entry, front ("1": it
-- goes in at the front of the queue, else "c" for a capped tenant's and
-- "0") and the task it goes behind there ("": none) to out. A tenant whose every flow
-- waits on a closed key is taken out (block). An entry whose task asynq
-- holds but not parked (archived, or run from outside), or whose task is
-- in run already (let in by another entry of its ID), is dropped, and
-- one run from outside is counted against its tenant's cap while it runs;
-- one whose task is missing (deleted, or not written yet) goes to limbo;
-- one whose asynq.Deadline passed is archived. None holds its tenant back.
local function pick(most, space, out)
  local budget = PICK_BUDGET -- a deleted backlog costs in steps
  fronted, granted = {}, batch('HSET', grants)
  -- The head of the order: vt's first members, read up to WINDOW + 1 at
  -- a time (whole when that is all of vt), and each tenant granted and
  -- placed again goes into the order with one ZADD (into) or ZREM (out)
  -- when the pick ends, and into the window when it sorts before the
  -- window's end: a turn over many tenants, each granted once, then reads
  -- the order once and writes it once, not twice a grant. Every other
  -- path through the pick reads or writes vt itself: it syncs first (the
  -- batches sent, the window read again when next needed). The window
  -- holds the members last first, names in wT and start tags in wS, so
  -- that the head comes off its end.
  local order = {into = batch('ZADD', vt), out = batch('ZREM', vt)}
  local wT, wS, whole
  local function sync()
    send(order.into)
    send(order.out)
    wT = nil
  end
  -- head takes the first tenant of the window, reading it when it is
  -- spent (the last one left, and the window not whole, leaves the next
  -- unknown), and returns its name and start, then the next one's.
  local function head()
    if not wT or (#wT < 2 and not whole) then
      sync()
      local n = math.max(math.min(most, space, WINDOW), 0)
      local zs = call('ZRANGE', vt, 0, n, 'WITHSCORES')
      local k = #zs / 2
      wT, wS, whole = {}, {}, k <= n
      for i = 1, #zs, 2 do
        wT[k], wS[k] = zs[i], tonumber(zs[i + 1])
        k = k - 1
      end
    end
    local k = #wT
    if k > 0 then
      local T, start = wT[k], wS[k]
      wT[k], wS[k] = nil, nil
      return T, start, wT[k - 1], wS[k - 1]
    end
  end
  -- put records tenant T placed again at start tag start: into the
  -- window before the members that sort after it, or out of it when it
  -- sorts after the window's end (vt's members past the window do too).
  local function put(T, start)
    local i = 1
    while i <= #wT and sortsBefore(T, start, wT[i], wS[i]) do
      i = i + 1
    end
    if i > 1 or whole then
      table.insert(wT, i, T)
      table.insert(wS, i, start)
    end
  end
  -- A streak: a tenant granted last (cur: its name, start, record and
  -- place to write when the streak ends) that has one flow and stays the
  -- lowest start tag is granted again without reading the queue or its
  -- record, and its record is written once.
  local cur, nextT, nextS
  -- stop ends the streak: it writes its tenant's record, and with placed
  -- its place too; empty says its line ran out. A tenant with nothing
  -- waiting is owed no place (Owed).
  local function stop(placed, empty)
    if not cur then
      return
    end
    local c, r = cur, cur.r
    cur = nil
    local wk = placed and r.wk and call('HGET', P .. 't:' .. c.T, 'wk') -- pop changed it
    local waiting = placed and waitingOf(c.T, wk or 0)
    if empty or waiting == 0 then
      r.ow = 0 -- nothing of it waits: no place is owed
    end
    call('HSET', P .. 't:' .. c.T, 'n', r.n, 'tag', r.tag, 'mv', r.mv, 'bh', r.bh and '1' or '0', 'lg', r.lg, 'ow', r.ow)
    if placed and place(c.T, r.tag, r.n, r.cap, '0', waiting, false, c.lend, order) and wT then
      put(c.T, startAt(r.tag, c.lend))
    end
  end
  while most > 0 and budget > 0 do
    local T, start, r
    if cur then
      T, start, r = cur.T, cur.start, cur.r
    else
      T, start, nextT, nextS = head()
      if not T and call('ZCARD', kw) > 0 then
        sync()
        if sweep() then
          T, start, nextT, nextS = head()
        end
      end
      if not T then
        break
      end
      r = readRecord(T)
    end
    local flows = FLOW0
    if r.wk then
      flows = flowsOf(T)
    end
    local f
    for _, g in ipairs(flows) do
      if flowOpen(g) then
        f = g
        break
      end
    end
    if space <= 0 and not owed(r.cap, r.ow) and not (f and keyFronts(f, start, r.tag)) then
      break -- once full, the queue takes only grants owed a place (rule.Pick)
    end
    local e = f and pop(T, f)
    if not f then
      sync()
      block(T, start, flows)
      budget = budget - 1
    elseif not e then
      stop(false, true)
      sync()
      call('ZREM', vt, T)
      settle(T)
    else
      local id = entryID(e)
      local ok, front, after
      if id and stale(id, e) then
        id = nil -- its ID was enqueued again: the new task has its own entry
      elseif id and toint(call('ZSCORE', scheduled, id)) == PARKED and not expired(id) then
        -- asynq keeps it parked (its move checks its state), and T was
        -- runnable: awake and not paused
        ok, front, after = grant(T, id, e, start, nil, f, r)
      end
      if ok then
        out[#out + 1], out[#out + 2], out[#out + 3], out[#out + 4] = T, e, front and '1' or r.cap > 0 and 'c' or '0', after
        most, space = most - 1, space - 1
        local lend = lent(r.cap, r.n, r.lg, r.est, r.wm)
        local again = startAt(r.tag, lend)
        cur = {T = T, start = again, lend = lend, r = r}
        if r.wk or (r.cap > 0 and r.n >= r.cap) or (nextT and sortsBefore(nextT, nextS, T, again)) then
          stop(true)
        end
      else
        stop()
        sync()
        budget = budget - 1
        local st = id and call('HGET', TP .. id, 'state')
        if id and not st then
          toLimbo(T, e, now + 1000, f)
        elseif (st == 'pending' or st == 'active') and grant(T, id, nil, start, 'p', f) then
          -- Run from outside (asynqmon's "run now"): it counts against
          -- its tenant's cap and its keys from now on, as if granted.
          space = space - 1
        end
        if id and hasDeadlines() and call('HEXISTS', run, id) == 0 then
          call('HDEL', deadlines, id) -- one in run keeps it (overdue)
        end
        for _, K in ipairs(flowKeys(f)) do
          release(K) -- the room it kept for this entry goes to the next
          settleKey(K)
        end
        refresh(T)
      end
    end
  end
  stop(true)
  sync()
  send(granted)
end

-- Move ops (fair_move.lua, and the tail of fair_dispatch.lua's ARGV):
-- GO moves a granted task into asynq's pending list, behind the tasks
-- there (its lock gets the op's TTL ms); FRONT moves it in at the end
-- asynq takes from, where the next free worker finds it, or right behind
-- the task its op names when that is still there; BACK puts it back at
-- the head of its tenant's line, refunds its charge and holds the tenant
-- for the op's µs; FREE lets a task out of run; DROP takes a waiting entry out of its line (its
-- producer's write failed): its "ID" is "<tenant>\n<flow>\n<entry>".
local GO, FRONT, BACK, FREE, DROP = 'go', 'front', 'back', 'free', 'drop'

-- drop takes waiting entry e out of tenant T's flow f.
local function drop(T, f, e)
  local l = line(T, f)
  local head = call('LINDEX', l, 0)
  if call('LREM', l, 1, e) == 0 then
    return
  end
  local id = entryID(e)
  if id and not stale(id, e) then
    call('HDEL', deadlines, id)
    disown(id)
  end
  if f ~= '0' then
    unlisted(T, f, e, head == e)
    for _, K in ipairs(flowKeys(f)) do
      settleKey(K)
    end
  end
  refresh(T)
  settle(T)
end

-- back returns granted task id (run entry r, waiting entry e) to the head
-- of its tenant's line, refunding its charge; its tenant sleeps us µs.
local function back(id, r, e, us)
  local _, est, _, T, f = runEntry(r)
  call('HDEL', run, id)
  call('HDEL', grants, id)
  local th = P .. 't:' .. T
  local h = call('HMGET', th, 'tag', 'wm', 'n')
  call('HSET', th, 'tag', toint(h[1]) - charge(est, toint(h[2])), 'n', math.max(toint(h[3]) - 1, 0))
  push(T, f, e, true)
  if us > 0 then
    lull(T, now + us)
  end
  refresh(T)
  leaveKeys(f)
end

-- moveIn moves granted task id (run entry r; its asynq.Unique TTL uttl ms;
-- its score in asynq's scheduled set, read before the ops) into asynq's
-- pending list while asynq still keeps it parked, and frees its place
-- when asynq no longer does. It reports whether the task moved.
-- A task for the front (fronts given) goes right behind task after when
-- that is pending still, else is appended to fronts, for the caller to
-- push in their order. Its writes to the scheduled set, the pending list
-- (behind), run and the grants go into w's batches (moveOps).
local function moveIn(id, r, uttl, score, fronts, after, w)
  local tk = TP .. id
  local h = call('HMGET', tk, 'state', 'unique_key')
  if h[1] ~= 'scheduled' or toint(score) ~= PARKED then
    free(id, r)
    return false
  end
  add(w.unparked, id)
  if not fronts then
    add(w.pushed, id)
  elseif after == '' then
    fronts[#fronts + 1] = id
  else
    send(w.pushed) -- so that after is found among the tasks moved before
    if call('LINSERT', pending, 'BEFORE', after, id) <= 0 then
      fronts[#fronts + 1] = id
    end
  end
  nowNs = nowNs or int(now * 1000)
  call('HSET', tk, 'state', 'pending', 'pending_since', nowNs)
  if h[2] and uttl > 0 and call('GET', h[2]) == id then
    call('PEXPIRE', h[2], uttl)
  end
  add(w.run, id, 'p' .. string.sub(r, 2))
  add(w.granted, id)
  return true
end

-- limits records tenant T's quota as it is now (cap, weight in
-- thousandths, paused "1" or "0"), when the queue has a record of it.
local function limits(T, cap, wm, paused)
  local th = P .. 't:' .. T
  if call('EXISTS', th) == 0 then
    return
  end
  call('HSET', th, 'cap', cap, 'wm', wm, 'paused', paused)
  if paused ~= '1' then
    call('SREM', held, T)
  end
  refresh(T)
end

-- updates applies the n updates (quads tenant, cap, weight in thousandths,
-- paused) in ARGV from ARGV[a], n first, then the j key updates (triples
-- key, cap, paused), j first, and returns the ARGV index after them.
local function updates(a)
  local n = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, n do
    limits(ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3])
    a = a + 4
  end
  n = tonumber(ARGV[a]) or 0 -- a caller that gives none
  a = a + 1
  for _ = 1, n do
    keyLimits(ARGV[a], ARGV[a + 1], ARGV[a + 2], false)
    a = a + 3
  end
  return a
end

-- readOps reads the n move ops (triples op, task ID, a number: the sleep
-- µs of BACK, the asynq.Unique TTL ms of GO and FRONT; FRONT then names
-- the task to go behind, "" for none) in ARGV from ARGV[a], n first, and
-- returns them and the ARGV index after them.
local function readOps(a)
  local ops = {}
  local n = tonumber(ARGV[a])
  a = a + 1
  for i = 1, n do
    local o = {op = ARGV[a], id = ARGV[a + 1], us = tonumber(ARGV[a + 2])}
    o.after = o.op == FRONT and ARGV[a + 3]
    a = a + (o.after and 4 or 3)
    ops[i] = o
  end
  return ops, a
end

-- applyOps applies move ops as readOps reads them and returns whether
-- each moved into the queue, by task ID (true), and how many did. A task
-- moves only from state g: two movers of one grant move it once.
local function applyOps(ops)
  local moved, fronts, into = 0, {}, {}
  local ids, moving = {}, {}
  for _, o in ipairs(ops) do
    if o.op ~= DROP then
      ids[#ids + 1] = o.id
    end
    if o.op == GO or o.op == FRONT then
      moving[#moving + 1] = o.id
    end
  end
  -- the tasks' run entries, read with one HMGET and kept in step with the
  -- ops' writes; the scores in asynq's scheduled set of those to move in,
  -- read with one ZMSCORE (no op writes the set before the moves' writes
  -- are sent); the moves' writes, sent once the ops are done
  local runs, scores = runEntries(ids), readBy('ZMSCORE', scheduled, moving)
  local backs = {}
  local w = {unparked = batch('ZREM', scheduled), pushed = batch('LPUSH', pending), run = batch('HSET', run),
    granted = batch('HDEL', grants)}
  for _, o in ipairs(ops) do
    local id = o.id
    local r = o.op ~= DROP and runs[id]
    if o.op == DROP then
      local T, f, e = string.match(id, '^([^\n]*)\n([^\n]*)\n(.*)$')
      if T then
        drop(T, f, e)
      end
    elseif r and o.op == FREE then
      send(w.run) -- an entry a move rewrote is written before free deletes it
      free(id, r)
      runs[id] = false
    elseif r and string.sub(r, 1, 1) == 'g' then
      if o.op == GO or o.op == FRONT then
        if moveIn(id, r, o.us, scores[id], o.after and fronts, o.after, w) then
          moved, into[id] = moved + 1, true
          runs[id] = 'p' .. string.sub(r, 2)
        else
          runs[id] = false
        end
      elseif o.op == BACK then
        local e = call('HGET', grants, id)
        if e then
          backs[#backs + 1] = {id = id, r = r, e = e, us = o.us}
          runs[id] = false
        end
      end
    end
  end
  for _, b in ipairs({w.unparked, w.pushed, w.run, w.granted}) do
    send(b)
  end
  -- Each goes back to the head of its line: the last first, so that a
  -- tenant's grants that all go back keep their order there.
  for i = #backs, 1, -1 do
    local b = backs[i]
    back(b.id, b.r, b.e, b.us)
  end
  -- the first for the front is taken first
  for i = #fronts, 1, -1 do
    call('RPUSH', pending, fronts[i])
  end
  return into, moved
end

-- moveOps applies the move ops in ARGV from ARGV[a] (readOps), and returns
-- how many tasks moved into the queue and the ARGV index after the ops.
local function moveOps(a)
  local ops
  ops, a = readOps(a)
  local _, moved = applyOps(ops)
  return moved, a
end

-- begin starts a call with its keys and arguments: it names the keys
-- (KEYS as the header lists them), reads the time and the queue's floor
-- and estimate, and forgets what the last call cached.
local function begin(keys_, argv)
  KEYS, ARGV = keys_, argv
  vt, sleep, run, meta, workers = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
  pending, active, scheduled = KEYS[6], KEYS[7], KEYS[8]
  grants, limbo, fresh, debts, held = KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
  deadlines, archived, keys, ksleep, kw, kheld = KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18], KEYS[19]
  P, TP = ARGV[1], ARGV[2]
  own = P .. 'own'
  call = redis.call
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  nowS, nowNs = int(now), nil
  keyCache, owing, anyDeadlines, anyOwn, filled, queued, freshLeft = {}, nil, nil, nil, nil, nil, nil
  local m = call('HMGET', meta, 'floor', 'est', 'cw', 'cu')
  floor, qest = toint(m[1]), toint(m[2])
  local r, f, total = string.match(m[3] or '', '^([01])|([01])|(%d+)$')
  sumUntil = r and toint(m[4]) or 0
  if sumUntil > now + SUMMARY_FOR then
    sumUntil = 0 -- written by a clock ahead of this one (a failover)
  end
  sumRecent, sumFair, sumTotal = r == '1', f == '1', tonumber(total)
end
