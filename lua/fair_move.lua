-- fair_move.lua: moves granted tasks into asynq's queue, or puts them back
-- in line, or lets tasks out of run. Runs after fair.lua (KEYS and the
-- first two ARGV are its).
--
-- ARGV[3]  n, then n triples: op, task ID, µs
--          op "go": the granted task goes into asynq's pending list now,
--             behind the tasks there (the µs are its asynq.Unique TTL ms)
--          op "front": as "go", at the end asynq takes from; a fourth
--             value names a task to go right behind if it is still
--             pending ("": none)
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
local moved = moveOps(3)
save()
return {moved}
