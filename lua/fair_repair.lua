-- fair_repair.lua: checks a page of run against asynq's view of each task,
-- so that what the dispatcher counts follows asynq. Runs after fair.lua
-- (KEYS and the first two ARGV are its).
--
-- ARGV[3]  HSCAN cursor of run ("0" to start)
-- ARGV[4]  grace µs: how old a grant must be before it is judged (its
--          mover may still be at work)
-- Returns  {next cursor, n, then n quads tenant, waiting entry, "0", ""
--          (as fair_dispatch.lua's grants, never for the front): grants
--          whose mover is gone, still parked in asynq, to admit and move
--          again}
--
-- A task asynq no longer holds (deleted, completed or archived) leaves run
-- and frees its tenant's place at once. A task asynq keeps parked again
-- after it went in (Redis came back from a snapshot) goes back to the head
-- of its tenant's line. A task asynq holds (pending, active, scheduled,
-- retry, or active on a worker cut off from Redis, whose lease asynq still
-- honours) keeps it: a permit is never taken from a running task. One in
-- asynq's retry set past its asynq.Deadline, which asynq would fail at
-- every retry without running it, is archived and frees its place; so does
-- one active whose lease ran out (lapsed): no worker runs it, and asynq's
-- recoverer will retry it, when it counts again (fair_adopt.lua).
local grace = tonumber(ARGV[4])
local page = call('HSCAN', run, ARGV[3], 'COUNT', 64)
local out, redo = {page[1]}, {}
local entries = page[2]
for i = 1, #entries, 2 do
  local id, r = entries[i], entries[i + 1]
  local state, _, since, T = runEntry(r)
  local s = call('HGET', TP .. id, 'state')
  local old = now - tonumber(since) > grace
  if not s or s == 'completed' or s == 'archived' then
    if state == 'p' or old then
      free(id, r)
    end
  elseif s == 'retry' and overdue(id) or s == 'active' and lapsed(id) then
    free(id, r)
  elseif state == 'p' and s == 'scheduled' and isParked(id) then
    requeue(id, r)
  elseif state ~= 'p' and old then
    local e = call('HGET', grants, id)
    if state == 'g' and e and isParked(id) then
      redo[#redo + 1], redo[#redo + 2], redo[#redo + 3], redo[#redo + 4] = T, e, '0', ''
    else
      call('HSET', run, id, 'p' .. string.sub(r, 2))
      call('HDEL', grants, id)
      call('ZREM', fresh, id)
    end
  end
end
if hasOwn() then
  call('ZREMRANGEBYSCORE', own, '-inf', now - OWN_FOR)
end
save()
out[2] = #redo / 4
for i = 1, #redo do
  out[#out + 1] = redo[i]
end
return out
