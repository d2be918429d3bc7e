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

// runFairDemo runs `admitq demo --scenario fair`: 8 fair workers doing
// 20ms tasks, first for one tenant alone (it must fill the pool), then for
// gold (weight 3) and basic (weight 1) at once (worker time must go 3:1).
// It exits 0 only if both checks hold and every task ran exactly once.
func (a *app) runFairDemo(ctx context.Context) error {
	rdb, cfg, done, err := a.demoRedis(ctx)
	if err != nil {
		return err
	}
	defer done()
	id := demo.NewRunID()
	fc := demo.FairConfig{Config: demo.Config{
		Redis: rdb, Worker: connOpt{cfg},
		Prefix: a.prefix + "-demo-" + id, Queue: "admitq-demo-" + id,
	}}
	fc.OnPhase = func(s string) { fmt.Fprintf(a.stdout, "%s\n", s) }
	fmt.Fprintf(a.stdout, "fair demo on %s\n", cfg.display)
	res, err := demo.RunFair(ctx, fc)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "\nalone: %v on the fair pool, %v on bare asynq (%.2f×); %v on a pool that never idles\n",
		res.Alone.Round(time.Millisecond), res.Bare.Round(time.Millisecond), float64(res.Alone)/float64(res.Bare), res.Ideal.Round(time.Millisecond))
	fmt.Fprintf(a.stdout, "contention: gold got %.2f× basic's worker time at weights 3:1\n", res.Ratio)
	check := func(ok bool, what string) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
		}
		fmt.Fprintf(a.stdout, "%s %s\n", mark, what)
	}
	check(res.FillsPool, "work-conserving: a tenant alone fills the pool (within 1.5× of bare asynq's time)")
	check(res.Weighted, "weighted: worker time goes 3:1 by weight (2.4× to 3.6×)")
	check(res.NothingLost, fmt.Sprintf("nothing lost: every task ran exactly once (sent %d, lost %d, twice %d)", res.Sent, len(res.Lost), len(res.Twice)))
	if !res.FillsPool || !res.Weighted || !res.NothingLost {
		return errors.New("demo: a check failed")
	}
	return nil
}
