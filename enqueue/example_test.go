package enqueue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
)

func ExampleClient_Enqueue() {
	// An in-memory Redis whose clock stands still, so the output is exact.
	// Use a real Redis in production.
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	mr.SetTime(time.Date(2100, 1, 1, 9, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	// Two tasks a minute per tenant; a task may wait up to a minute.
	q := admission.Quota{Limit: 2, Window: time.Minute, MaxDelay: time.Minute}
	gate := admission.New(rdb, admission.StaticQuotas{Default: &q})
	defer gate.Close()
	client := enqueue.NewFromRedis(rdb, gate)

	for i := 1; i <= 5; i++ {
		task := asynq.NewTask("email:send", []byte(`{"to":"ann@example.com"}`))
		id := fmt.Sprintf("job-%d", i)
		_, d, err := client.Enqueue(context.Background(), "acme", task, asynq.TaskID(id))
		var rej *enqueue.RejectedError
		switch {
		case errors.As(err, &rej):
			// Whole seconds, rounded up, as in an HTTP Retry-After header.
			secs := (rej.RetryAfter() + time.Second - 1) / time.Second
			fmt.Printf("%s rejected, retry after %ds\n", id, secs)
		case err != nil:
			fmt.Printf("%s not enqueued: %v\n", id, err)
		default:
			fmt.Printf("%s %s, runs in %v\n", id, d.Outcome, d.Delay())
		}
	}
	// Output:
	// job-1 admitted, runs in 0s
	// job-2 admitted, runs in 0s
	// job-3 deferred, runs in 1m0s
	// job-4 deferred, runs in 1m0s
	// job-5 rejected, retry after 60s
}

func ExampleClient_EnqueueBatch() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	mr.SetTime(time.Date(2100, 1, 1, 9, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	q := admission.Quota{Limit: 1, Window: time.Second, MaxDelay: 2 * time.Second}
	gate := admission.New(rdb, admission.StaticQuotas{Default: &q})
	defer gate.Close()
	client := enqueue.NewFromRedis(rdb, gate)

	var tasks []*asynq.Task
	for i := 1; i <= 4; i++ {
		tasks = append(tasks, asynq.NewTask("report:build", nil, asynq.TaskID(fmt.Sprintf("report-%d", i))))
	}
	results, err := client.EnqueueBatch(context.Background(), "acme", tasks)
	if err != nil {
		panic(err)
	}
	for i, r := range results {
		if r.Err != nil {
			fmt.Printf("report-%d: %v\n", i+1, r.Err)
			continue
		}
		fmt.Printf("%s %s at %s\n", r.Info.ID, r.Decision.Outcome, r.Decision.At.UTC().Format(time.TimeOnly))
	}
	// Output:
	// report-1 admitted at 09:00:00
	// report-2 deferred at 09:00:01
	// report-3 deferred at 09:00:02
	// report-4: enqueue: tenant "acme" rejected, over quota: retry after 1s (at 2100-01-01T09:00:01Z)
}

func ExampleKeys() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	mr.SetTime(time.Date(2100, 1, 1, 9, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	// Each tenant may have 2 tasks in flight; the Stripe API takes 20 at
	// once across all tenants. The caps hold in a queue that a worker with
	// the gate serves (worker.Config.Gate); this example runs none.
	q := admission.Quota{Limit: admission.NoLimit, MaxInFlight: 2}
	quotas := admission.StaticQuotas{Default: &q, Keys: map[string]admission.Quota{
		"api:stripe": {Limit: admission.NoLimit, MaxInFlight: 20},
	}}
	gate := admission.New(rdb, quotas)
	defer gate.Close()
	client := enqueue.NewFromRedis(rdb, gate)

	ctx := context.Background()
	task := asynq.NewTask("invoice:charge", []byte(`{"invoice":42}`))
	info, d, err := client.Enqueue(ctx, "acme", task, enqueue.Keys("api:stripe"), enqueue.Priority(10))
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s, keys %q\n", d.Outcome, info.Headers[enqueue.KeysHeader])

	_, _, err = client.Enqueue(ctx, "acme", task, enqueue.Priority(5000))
	fmt.Println(errors.Is(err, enqueue.ErrInvalidOption), err)
	_, _, err = client.Enqueue(ctx, "acme", task, enqueue.Keys("api:stripe", ""))
	fmt.Println(errors.Is(err, admission.ErrInvalidKey), err)
	// Output:
	// admitted, keys "api:stripe"
	// true enqueue: invalid option Priority(5000): a priority is -1000 to 1000
	// true enqueue: invalid option Keys("api:stripe", ""): admitq: invalid key: empty
}
