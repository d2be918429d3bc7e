package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/admitq/admitq/cmd/admitq/internal/demo"
	"github.com/admitq/admitq/metrics"
)

func (a *app) newDemoCmd() *cobra.Command {
	var (
		duration      time.Duration
		chart         string
		metricsAddr   string
		dash          bool
		dashboardAddr string
		scenario      string
	)
	cmd := &cobra.Command{
		Use:   "demo [--duration 20s] [--chart FILE.svg|FILE.png] [--dashboard]",
		Short: "Watch a noisy tenant get flattened to its quota",
		Long: `Runs a worker pool and its producers in one process, prints what happens
each second and checks what admitq promises; it exits 0 only if every check
holds.

--scenario rate (the default): three tenants; "noisy" sends four times its
quota, "steady" and "small" stay within theirs. Each second it prints, per
tenant, the decisions (admitted, deferred, rejected), the tasks processed and
the tenant's window. At the end it checks that no tenant got more than its
limit in any window, and that no task was lost.

--scenario depth: 3 workers doing 100ms tasks meet a noisy tenant's backlog of
60 and a light tenant sending one task every 250ms for --duration (6s unless
given), both capped at 2 in flight. It checks that no tenant ever had more
than 2 tasks pending or running in asynq and that every task ran once.

--scenario fair: 8 fair workers doing 20ms tasks, first for one tenant alone
(it must finish within 1.5x of bare asynq's time on the same Redis), then for
two tenants at weights 3:1 (worker time must go 3:1), and every task must run
exactly once. It takes no --duration.

Every scenario, without --redis (or ADMITQ_REDIS, or --redis-cluster), runs on
an embedded Redis (miniredis) inside the process and needs no redis-server.
With one, it runs against that server, under its own key prefix and queue, and
removes them afterwards, with any tasks still scheduled when it was interrupted.

--dashboard serves admitq dashboard on the demo's Redis while the scenario
runs, and prints its URL. --dashboard, --chart and --metrics-addr apply to
the rate scenario; depth and fair ignore them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if duration < time.Second {
				return usageErrorf("--duration %v: want at least 1s", duration)
			}
			switch scenario {
			case "rate":
			case "depth":
				d := time.Duration(0)
				if cmd.Flags().Changed("duration") {
					d = duration
				}
				return a.runDepthDemo(cmd.Context(), d) // demodepth.go
			case "fair":
				return a.runFairDemo(cmd.Context()) // demodepth.go
			default:
				return usageErrorf("--scenario %q: want rate, depth or fair", scenario)
			}
			var format string
			if chart != "" {
				switch strings.ToLower(filepath.Ext(chart)) {
				case ".svg":
					format = "svg"
				case ".png":
					format = "png"
				default:
					return usageErrorf("--chart %s: want a .svg or .png file name", chart)
				}
				// Before the demo, not after it: a typo must not cost
				// a whole run.
				if err := checkWritable(chart); err != nil {
					return usageErrorf("--chart %s: %w", chart, err)
				}
			}
			if metricsAddr != "" {
				if _, _, err := net.SplitHostPort(metricsAddr); err != nil {
					return usageErrorf("--metrics-addr %s: want host:port", metricsAddr)
				}
			}
			if !dash {
				dashboardAddr = ""
			} else if err := checkDashboardAddr("--dashboard-addr", dashboardAddr, "", false); err != nil {
				return usageError(err)
			}
			return a.runDemo(cmd.Context(), duration, chart, format, metricsAddr, dashboardAddr)
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&duration, "duration", 20*time.Second, "how long the producers send")
	fs.StringVar(&chart, "chart", "", "write a chart of tasks started per second to `FILE` (.svg or .png)")
	fs.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus /metrics on this address while the demo runs")
	fs.BoolVar(&dash, "dashboard", false, "serve the dashboard while the demo runs")
	fs.StringVar(&dashboardAddr, "dashboard-addr", "127.0.0.1:8080", "loopback address of --dashboard")
	fs.StringVar(&scenario, "scenario", "rate", "rate: a noisy tenant flattened to its quota; depth: a slow worker pool meets a noisy tenant's backlog, capped by MaxInFlight; fair: a fair pool filled by one tenant, then shared 3:1 by weight")
	return cmd
}

func (a *app) runDemo(ctx context.Context, duration time.Duration, chart, format, metricsAddr, dashboardAddr string) error {
	embedded := a.redisURLOrEnv() == "" && a.redisCluster == ""
	if embedded && a.tlsCA != "" {
		return usageErrorf("--tls-ca needs --redis or --redis-cluster")
	}
	rdb, cfg, done, err := a.demoRedis(ctx)
	if err != nil {
		return err
	}
	defer done()

	var m *metrics.Metrics
	reg := prometheus.NewRegistry()
	if metricsAddr != "" || dashboardAddr != "" {
		m = metrics.New()
		reg.MustRegister(m)
	}
	if metricsAddr != "" {
		ln, err := net.Listen("tcp", metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		metricsAddr = "http://" + ln.Addr().String() + "/metrics"
	}

	id := demo.NewRunID()
	dc := demo.Config{
		Redis:    rdb,
		Worker:   connOpt{cfg},
		Prefix:   a.prefix + "-demo-" + id,
		Queue:    "admitq-demo-" + id,
		Tenants:  demo.DefaultTenants(),
		Duration: duration,
		Timeout:  a.timeout,
		Metrics:  m,
	}
	var dashboardURL string
	if dashboardAddr != "" {
		stop, url, err := a.demoDashboard(ctx, dashboardAddr, rdb, cfg, dc, reg)
		if err != nil {
			return err
		}
		defer stop()
		dashboardURL = url
	}
	p := &demoPrinter{w: a.stdout, color: a.colorful(a.stdout), tenants: dc.Tenants}
	p.header(dc, cfg, embedded, metricsAddr, dashboardURL)
	dc.OnSecond = p.second
	res, err := demo.Run(ctx, dc)
	if err != nil {
		return err
	}
	p.summary(res)
	if chart != "" {
		if err := writeChart(chart, format, demo.ChartOf(res)); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "chart: %s\n", chart)
	}
	switch {
	case res.Interrupted:
		return &exitError{code: 130}
	case !res.Bound || !res.NothingLost:
		return errors.New("demo: a check failed")
	}
	return nil
}

// checkWritable reports whether a file can be created at path, without
// creating it: its directory exists and takes a new file, and path is not a
// directory.
func checkWritable(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return errors.New("is a directory")
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".admitq-chart-*")
	if err != nil {
		var perr *os.PathError
		if errors.As(err, &perr) {
			err = perr.Err
		}
		return fmt.Errorf("cannot create a file in %s: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

func writeChart(path, format string, c demo.Chart) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--chart: %w", err)
	}
	if format == "png" {
		err = c.WritePNG(f)
	} else {
		err = c.WriteSVG(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--chart: %w", err)
	}
	return nil
}

// demoPrinter writes the demo's output: aligned, coloured on a terminal.
type demoPrinter struct {
	w        io.Writer
	color    bool
	tenants  []demo.Tenant
	nameW    int
	draining bool
}

const (
	ansiReset  = "\x1b[0m"
	ansiBold   = "\x1b[1m"
	ansiDim    = "\x1b[2m"
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
)

func (p *demoPrinter) paint(code, s string) string {
	if !p.color || code == "" {
		return s
	}
	return code + s + ansiReset
}

// num right-aligns n in width, coloured when not zero.
func (p *demoPrinter) num(n, width int, code string) string {
	s := fmt.Sprintf("%*d", width, n)
	if n == 0 {
		return p.paint(ansiDim, s)
	}
	return p.paint(code, s)
}

func (p *demoPrinter) header(dc demo.Config, cfg redisConfig, embedded bool, metricsAddr, dashboardURL string) {
	p.nameW = len("tenant")
	for _, t := range p.tenants {
		p.nameW = max(p.nameW, len(t.Name))
	}
	where := "an embedded Redis (miniredis) at " + strings.TrimPrefix(cfg.display, "redis://")
	if !embedded {
		where = "Redis at " + cfg.display
	}
	fmt.Fprintf(p.w, "%s %d tenants for %v on %s\n", p.paint(ansiBold, "admitq demo:"), len(p.tenants), dc.Duration, where)
	fmt.Fprintf(p.w, "%s\n", p.paint(ansiDim, fmt.Sprintf("keys under %s, asynq queue %s", dc.Prefix, dc.Queue)))
	if metricsAddr != "" {
		fmt.Fprintf(p.w, "%s\n", p.paint(ansiDim, "metrics at "+metricsAddr))
	}
	if dashboardURL != "" {
		fmt.Fprintf(p.w, "%s %s\n", p.paint(ansiBold, "dashboard at"), dashboardURL)
	}
	fmt.Fprintln(p.w)
	fmt.Fprintf(p.w, "  %-*s  %-24s  %s\n", p.nameW, "tenant", "quota", "sends")
	for _, t := range p.tenants {
		q := fmt.Sprintf("%d per %v, max delay %v", t.Quota.Limit, t.Quota.Window, t.Quota.MaxDelay)
		perSec := float64(t.Quota.Limit) / t.Quota.Window.Seconds()
		note := ""
		if t.Rate > perSec {
			note = p.paint(ansiRed, fmt.Sprintf("  %.0f× its quota", t.Rate/perSec))
		}
		fmt.Fprintf(p.w, "  %-*s  %-24s  %3.0f/s%s\n", p.nameW, t.Name, q, t.Rate, note)
	}
	fmt.Fprintln(p.w)
	fmt.Fprintf(p.w, "  %4s  %-*s  %8s  %8s  %8s  %9s  %s\n", "sec", p.nameW, "tenant", "admitted", "deferred", "rejected", "processed", "window")
}

func (p *demoPrinter) second(s demo.Second) {
	if s.Draining && !p.draining {
		p.draining = true
		fmt.Fprintf(p.w, "  %s\n", p.paint(ansiDim, "-- sending stopped; deferred tasks come due --"))
	}
	for i, t := range s.Tenants {
		sec := ""
		if i == 0 {
			sec = fmt.Sprint(s.N)
		}
		win := fmt.Sprintf("%3d/%-3d", t.InWindow, t.Limit)
		if t.Ahead > 0 {
			win += fmt.Sprintf(" +%d ahead", t.Ahead)
		}
		if t.UsageErr != nil {
			win = "?"
		}
		errs := ""
		if t.Errors > 0 {
			errs = p.paint(ansiRed, fmt.Sprintf("  %d errors", t.Errors))
		}
		line := fmt.Sprintf("  %4s  %-*s  %s  %s  %s  %s  %s%s", sec, p.nameW, t.Tenant,
			p.num(t.Admitted, 8, ansiGreen), p.num(t.Deferred, 8, ansiYellow), p.num(t.Rejected, 8, ansiRed),
			p.num(t.Processed, 9, ""), win, errs)
		fmt.Fprintln(p.w, strings.TrimRight(line, " "))
	}
}

func (p *demoPrinter) summary(res demo.Result) {
	fmt.Fprintln(p.w)
	head := fmt.Sprintf("summary: %v of sending, %v in all", res.Sending.Round(time.Second), res.Elapsed.Round(100*time.Millisecond))
	if res.Interrupted {
		head += " (interrupted)"
	}
	fmt.Fprintln(p.w, p.paint(ansiBold, head))
	fmt.Fprintf(p.w, "  %-*s  %6s  %8s  %8s  %8s  %6s  %9s  %8s  %9s  %s\n", p.nameW, "tenant",
		"sent", "admitted", "deferred", "rejected", "errors", "processed", "in asynq", "started/s", "slot→start p50 / p99")
	var sent, processed, waiting, rejected, errs, lost, slots int
	for _, t := range res.Tenants {
		fmt.Fprintf(p.w, "  %-*s  %6d  %8d  %8d  %8d  %6d  %9d  %8d  %9s  %v / %v\n", p.nameW, t.Name,
			t.Sent, t.Admitted, t.Deferred, t.Rejected, t.Errors, t.Processed, t.Waiting,
			fmt.Sprintf("%d", startedRate(t, res.Sending)), roundDelay(t.DelayP50), roundDelay(t.DelayP99))
		sent += t.Sent
		processed += t.Processed
		waiting += t.Waiting
		rejected += t.Rejected
		errs += t.Errors
		lost += t.Lost
		slots += t.Slots
	}
	fmt.Fprintln(p.w)

	var most []string
	early := 0
	for _, t := range res.Tenants {
		most = append(most, fmt.Sprintf("%s %d/%d", t.Name, t.MaxInWindow, t.Quota.Limit))
		early += t.StartedEarly
	}
	fmt.Fprintf(p.w, "check 1  no tenant got more than its limit in any window: %s\n", p.verdict(res.Bound))
	fmt.Fprintf(p.w, "         %d recorded slots checked exactly; most in any window: %s\n", slots, strings.Join(most, ", "))
	fmt.Fprintf(p.w, "         tasks that started before their slot: %d\n", early)
	fmt.Fprintf(p.w, "check 2  every task sent was processed, is in asynq, or was refused back to its producer: %s\n", p.verdict(res.NothingLost))
	fmt.Fprintf(p.w, "         %d sent = %d processed + %d in asynq + %d refused (%d rejected, %d errors) + %d lost\n",
		sent, processed, waiting, rejected+errs, rejected, errs, lost)
	for _, t := range res.Tenants {
		q := float64(t.Quota.Limit) / t.Quota.Window.Seconds()
		if t.Rate > q {
			fmt.Fprintf(p.w, "\n%s sent %.0f/s and started %d/s (median second): flattened to its quota of %.0f/s.\n",
				t.Name, t.Rate, startedRate(t, res.Sending), q)
		}
	}
}

// startedRate is the median of the tasks started in each whole second of
// sending. The median, because the first second after a burst of
// admissions starts nothing: slots after it round up to the whole second
// after next (asynq schedules in whole seconds).
func startedRate(t demo.TenantResult, sending time.Duration) int {
	n := min(int(sending/time.Second), len(t.Started))
	if n == 0 {
		return 0
	}
	s := slices.Clone(t.Started[:n])
	slices.Sort(s)
	return s[n/2]
}

func (p *demoPrinter) verdict(ok bool) string {
	if ok {
		return p.paint(ansiGreen+ansiBold, "PASS")
	}
	return p.paint(ansiRed+ansiBold, "FAIL")
}

// demoRedis connects a demo to the Redis of --redis or --redis-cluster, or
// when neither is given to an embedded one (miniredis) that done stops.
func (a *app) demoRedis(ctx context.Context) (_ redis.UniversalClient, _ redisConfig, done func(), err error) {
	var cfg redisConfig
	stop := func() {}
	if a.redisURLOrEnv() == "" && a.redisCluster == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			return nil, cfg, nil, fmt.Errorf("starting the embedded Redis: %w", err)
		}
		stop = mr.Close
		cfg = redisConfig{single: &redis.Options{Addr: mr.Addr()}, display: "redis://" + mr.Addr()}
	} else if cfg, err = a.redisConfig(); err != nil {
		return nil, cfg, nil, err
	}
	rdb, _, err := a.dialConfig(ctx, cfg)
	if err != nil {
		stop()
		return nil, cfg, nil, err
	}
	return rdb, cfg, func() { rdb.Close(); stop() }, nil
}
