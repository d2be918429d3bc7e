package admission_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
)

// A quota of 2 a minute, with up to a minute of deferral: two requests run
// now, the next two wait for the slot that frees up a minute later, and the
// fifth is refused with the time a retry could succeed.
func Example() {
	mr := miniredis.NewMiniRedis() // an embedded Redis with a clock we set
	_ = mr.Start()
	defer mr.Close()
	mr.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	quotas := admission.StaticQuotas{Default: &admission.Quota{Limit: 2, Window: time.Minute, MaxDelay: time.Minute}}
	gate := admission.New(rdb, quotas)
	defer gate.Close()

	for range 5 {
		d, err := gate.Admit(context.Background(), "acme")
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s, wait %v, at %s\n", d.Outcome, d.Delay().Round(time.Second), d.At.UTC().Format(time.TimeOnly))
	}
	// Output:
	// admitted, wait 0s, at 12:00:00
	// admitted, wait 0s, at 12:00:00
	// deferred, wait 1m0s, at 12:01:00
	// deferred, wait 1m0s, at 12:01:00
	// rejected, wait 1m0s, at 12:01:00
}

// Every decision has one of four outcomes; a caller switches on it. Parked
// comes only to calls that carry tasks for a tenant with a MaxInFlight cap
// (package enqueue makes them), so this gate gives the other three.
func ExampleOutcome() {
	mr := miniredis.NewMiniRedis()
	_ = mr.Start()
	defer mr.Close()
	mr.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	gate := admission.New(rdb, admission.StaticQuotas{Default: &admission.Quota{Limit: 1, Window: time.Minute, MaxDelay: time.Minute}})
	defer gate.Close()

	for range 3 {
		d, err := gate.Admit(context.Background(), "acme")
		switch {
		case err != nil:
			fmt.Println("error:", err) // Redis unavailable (FailClosed), or a bad tenant or quota
		case d.Outcome == admission.Admitted:
			fmt.Println("admitted: run now")
		case d.Outcome == admission.Deferred:
			fmt.Println("deferred: run at", d.At.UTC().Format(time.TimeOnly))
		case d.Outcome == admission.Parked:
			fmt.Println("parked: runs when one of the tenant's tasks finishes")
		case d.Outcome == admission.Rejected:
			fmt.Println("rejected: retry after", d.Delay().Round(time.Second))
		}
	}
	// Output:
	// admitted: run now
	// deferred: run at 12:01:00
	// rejected: retry after 1m0s
}

// AdmitID is idempotent: a producer that retries with the same ID gets its
// original slot back and takes no second one.
func ExampleGate_AdmitID() {
	mr := miniredis.NewMiniRedis()
	_ = mr.Start()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	gate := admission.New(rdb, admission.StaticQuotas{Default: &admission.Quota{Limit: 10, Window: time.Minute}})
	defer gate.Close()

	ctx := context.Background()
	first, err := gate.AdmitID(ctx, "acme", "order-42")
	if err != nil {
		fmt.Println(err)
		return
	}
	again, err := gate.AdmitID(ctx, "acme", "order-42")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(first.Outcome, first.Remaining, first.Existing)
	fmt.Println(again.Outcome, again.At.Equal(first.At), again.Existing)
	// Output:
	// admitted 9 false
	// admitted true true
}

// Operators change quotas in Redis; every gate reading the same store sees
// the change within about a second.
func ExampleRedisQuotas() {
	mr := miniredis.NewMiniRedis()
	_ = mr.Start()
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	ctx := context.Background()
	quotas := admission.NewRedisQuotas(rdb)
	if err := quotas.SetDefault(ctx, admission.Quota{Limit: 100, Window: time.Minute}); err != nil {
		fmt.Println(err)
		return
	}
	if err := quotas.Set(ctx, "noisy", admission.Quota{Limit: 10, Window: time.Minute, MaxDelay: 30 * time.Second}); err != nil {
		fmt.Println(err)
		return
	}

	for _, tenant := range []string{"noisy", "quiet"} {
		q, err := quotas.Quota(ctx, tenant)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %v\n", tenant, q)
	}
	_, err := quotas.Get(ctx, "quiet") // Get reads the tenant's own quota: the default does not count
	fmt.Println(err)
	// Output:
	// noisy: 10/1m0s, max delay 30s
	// quiet: 100/1m0s
	// admitq: no quota for tenant "quiet"
}
