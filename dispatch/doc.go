// Package dispatch shares each asynq queue's workers among tenants: it is
// where Quota.MaxInFlight (a hard cap) and fair queues (a weighted,
// work-conserving share of worker time) live, as one mechanism that both
// enqueue and worker use.
//
// A queue is dispatched while a worker with a Gate serves it (worker.Config
// Gate, and Fair for a fair queue), as that worker records in Redis. There,
// a producer's task (enqueue.Client) either goes straight in, when its
// tenant has nothing waiting, is under its cap and the queue has space, or
// waits: asynq stores it durably, scheduled until ParkedUntil, and the
// dispatcher keeps its place in its tenant's line. As workers finish tasks,
// the dispatcher grants waiting tasks in order of their tenants' start tags
// (start-time fair queueing on worker time, divided by Quota.Weight),
// charges each its tenant's estimated run time, corrects the charge with
// the measured time when the task ends, admits it through the Gate's slot
// rule at that moment (so the rate holds for start times) and moves it into
// asynq's pending list in one atomic script that checks asynq's state of
// the task first. A queue that no worker with a Gate has served for its
// restart grace (DefaultRestartGrace, 30 s) is never waited on: tasks go
// straight to asynq, as without the dispatcher.
//
// A fair queue holds at most its gate workers' total concurrency and half
// as much again of tasks, pending, active or granted, so a light tenant's
// task waits behind at most about half a round of work. Outside fair
// queues only capped and paused tenants' tasks are dispatched, and space is
// not limited. Quota.Paused holds a tenant's waiting tasks, and
// worker.Throttled holds them for as long as it asks.
//
// A capped tenant's task that ends while its cap holds it back frees a
// place that its next task fills at the front of asynq's pending list. A
// worker that calls Server.Done when asynq has marked a task done, before
// asynq frees its slot, waits for that move and takes the task (the
// worker's loop admits the tenant's next task meanwhile, so the turn that
// grants it moves it in at once); one that
// calls Server.AwaitMove when asynq finds the queue empty takes a task the
// moment the dispatcher moves it in, rather than at asynq's next poll.
// package worker does both, from the Redis client it gives asynq. A
// concurrency key's place that its cap takes back the same way goes to a
// waiting task of the key at the front too, when that task's tenant is
// held below its share.
//
// The rule itself (start tags in integer virtual time, the floor, weights,
// caps, pause) is one Go model, dispatch/internal/rule, which the scripts
// mirror step for step; the package's tests replay seeded workloads
// against both, and a seeded simulation checks the model's shares against
// a max-min fair oracle.
//
// Every key of a queue shares asynq's hash tag for it, {<queue>}, so each
// step is one script on one Redis Cluster slot. The tenant's rate log lives
// in its own slot: the admission between grant and move is idempotent on
// the task ID, and a grant whose mover died is found and finished by any
// worker's repair pass, which also frees the place of any task asynq no
// longer holds (deleted, completed, archived) and never one asynq still
// holds, running or not.
//
// Most programs never call this package: enqueue.NewFromRedis and
// worker.New use it. It needs the gate and asynq on the same Redis.
package dispatch
