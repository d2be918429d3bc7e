package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/admitq/admitq/cmd/admitq/internal/demo"
	"github.com/admitq/admitq/dispatch"
)

// runDepthDemo runs `admitq demo --scenario depth`: a worker pool of 3
// doing 100ms tasks meets a noisy tenant's backlog of 60, with a light
// tenant beside it, both capped at 2 in flight. Once a second it prints
// each tenant's in flight and parked; at the end it checks that no tenant
// ever had more than 2 tasks pending or running in asynq, and that every
// task ran once and nothing is left parked. It exits 0 only if both hold.
func (a *app) runDepthDemo(ctx context.Context, duration time.Duration) error {
	rdb, cfg, done, err := a.demoRedis(ctx)
	if err != nil {
		return err
	}
	defer done()
	id := demo.NewRunID()
	dc := demo.DepthConfig{Config: demo.Config{
		Redis: rdb, Worker: connOpt{cfg}, Duration: duration,
		Prefix: a.prefix + "-demo-" + id, Queue: "admitq-demo-" + id,
	}}
	dc.OnDepth = func(elapsed time.Duration, qs dispatch.QueueStats) {
		parts := []string{"idle"}
		if len(qs.Tenants) > 0 {
			parts = parts[:0]
		}
		for _, t := range qs.Tenants {
			parts = append(parts, fmt.Sprintf("%s: in flight %d/%d, parked %d", t.Tenant, t.InFlight, t.Cap, t.Waiting))
		}
		fmt.Fprintf(a.stdout, "%4v  %s\n", elapsed, strings.Join(parts, "   "))
	}
	fmt.Fprintf(a.stdout, "depth demo on %s: 3 workers doing 100ms tasks; noisy dumps 60 tasks, light sends one every 250ms; both capped at 2 in flight\n", cfg.display)
	res, err := demo.RunDepth(ctx, dc)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "\nmost tasks pending or running in asynq at once: noisy %d, light %d (cap %d)\n", res.MostInQueue["noisy"], res.MostInQueue["light"], res.Cap)
	fmt.Fprintf(a.stdout, "sent: noisy %d, light %d; ran: noisy %d, light %d; light's longest wait %v\n",
		res.Sent["noisy"], res.Sent["light"], res.Ran["noisy"], res.Ran["light"], res.LightWorst.Round(time.Millisecond))
	check := func(ok bool, what string) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
		}
		fmt.Fprintf(a.stdout, "%s %s\n", mark, what)
	}
	check(res.Bound, fmt.Sprintf("depth bound: no tenant had more than %d tasks in the queue", res.Cap))
	check(res.NothingLost, fmt.Sprintf("nothing lost: every task ran exactly once, none left parked (lost %d, twice %d)", len(res.Lost), len(res.Twice)))
	if !res.Bound || !res.NothingLost {
		return errors.New("demo: a check failed")
	}
	return nil
}
