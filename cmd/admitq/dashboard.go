package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/admitq/admitq/cmd/admitq/internal/dashboard"
	"github.com/admitq/admitq/cmd/admitq/internal/demo"
)

// dashboardTokenEnv is where the dashboard's token may come from instead
// of --auth-token, which other users of the machine can see in ps.
const dashboardTokenEnv = "ADMITQ_DASHBOARD_TOKEN"

func (a *app) newDashboardCmd() *cobra.Command {
	var (
		addr, token, queue, metricsURLs string
		readOnly, trustProxy            bool
	)
	cmd := &cobra.Command{
		Use:   "dashboard [--addr 127.0.0.1:8080] [--read-only] [--auth-token T]",
		Short: "Serve a web page of every tenant's window, rates and quota, with asynqmon",
		Long: `Serves the dashboard: a live tenants page (quota, window, reservations, next
free slot, decisions and tasks started per second, flags), a page per tenant
with its window as a timeline, quota editing, pause and resume, a keys page
(each dispatched queue's concurrency keys: in flight against the key's cap,
waiting, paused, held by a throttle; the key quotas) with a page per key to
pause and resume it, and asynqmon under /asynq/.

Decisions and task starts per second are read from the Prometheus metrics of
producers and workers (--metrics; admitq worker serves them at
` + defaultMetricsAddr + ` by default), not from Redis.

It binds to loopback by default. Any other address needs a token, from
--auth-token or ` + dashboardTokenEnv + ` (better: it stays out of ps); with a
token, every page and every write needs it. A sign-in lasts 12 hours on the
server and ends at sign-out. Sign-in attempts are limited per client
address: past 5, each waits its turn, one every 2s, so that the right token
still gets in. Behind a proxy, --trust-proxy counts them against the client
address the proxy saw (X-Forwarded-For's right-most hop that is not the
proxy's, else X-Real-IP) and makes cookies Secure when the proxy sends
X-Forwarded-Proto: https.`,
		Example: `  admitq dashboard
  ADMITQ_DASHBOARD_TOKEN=$(openssl rand -hex 16) admitq dashboard --addr :8080
  admitq dashboard --metrics http://10.0.0.5:9464/metrics,http://10.0.0.6:9464/metrics`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if token == "" {
				token = a.getenv(dashboardTokenEnv)
			}
			if token != "" && strings.TrimSpace(token) == "" {
				return usageErrorf("--auth-token (or %s) is blank: give a token of %d or more characters, e.g. $(openssl rand -hex 16)", dashboardTokenEnv, minTokenLen)
			}
			if err := checkDashboardAddr("--addr", addr, token, true); err != nil {
				return usageError(err)
			}
			if err := validateQueue("--queue", queue); err != nil {
				return err
			}
			if token != "" && len(token) < minTokenLen {
				fmt.Fprintf(a.stderr, "admitq: warning: the dashboard's token is %d characters: anyone who can reach %s may guess it; use %d or more, e.g. $(openssl rand -hex 16)\n", len(token), addr, minTokenLen)
			}
			var sources []dashboard.Source
			for _, u := range strings.Split(metricsURLs, ",") {
				if u = strings.TrimSpace(u); u != "" {
					if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
						return usageErrorf("--metrics %s: want an http:// or https:// URL", u)
					}
					sources = append(sources, dashboard.Scrape(u, nil))
				}
			}
			rdb, cfg, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer rdb.Close()
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("--addr: %w", err)
			}
			srv, err := dashboard.New(dashboard.Config{
				Redis: rdb, Asynq: connOpt{cfg}, Queue: queue, Prefix: a.prefix, Timeout: a.timeout,
				Token: token, TrustProxy: trustProxy, ReadOnly: readOnly, Sources: sources,
				Logger: slog.New(slog.NewTextHandler(a.stderr, nil)),
			})
			if err != nil {
				ln.Close()
				return err
			}
			defer srv.Close()
			fmt.Fprintf(a.stdout, "admitq dashboard at %s on Redis at %s\n", dashboardURL(ln.Addr()), cfg.display)
			return serveDashboard(cmd.Context(), ln, srv)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&addr, "addr", "127.0.0.1:8080", "address to serve on; one that is not loopback needs a token")
	fs.BoolVar(&readOnly, "read-only", false, "refuse every write: quota changes here and task actions in asynqmon")
	fs.StringVar(&token, "auth-token", "", "token every page and write needs (env "+dashboardTokenEnv+")")
	fs.BoolVar(&trustProxy, "trust-proxy", false, "believe the proxy in front: X-Forwarded-For or X-Real-IP for the client address that sign-in attempts count against, X-Forwarded-Proto: https for Secure cookies; set only when every request comes through it")
	fs.StringVar(&queue, "queue", "default", "asynq queue of the tenants' tasks, for links to them in asynqmon")
	fs.StringVar(&metricsURLs, "metrics", "http://"+defaultMetricsAddr+"/metrics", "Prometheus /metrics URLs of producers and workers, comma-separated; \"\" reads none")
	return cmd
}

// minTokenLen is the shortest dashboard token given without a warning:
// 16 characters, as 8 random bytes in hex are, or 96 bits in base64.
const minTokenLen = 16

// checkDashboardAddr refuses a non-loopback address without a token. flag
// names the flag that gave addr; withToken says whether the command takes
// a token (the demo's dashboard does not).
func checkDashboardAddr(flag, addr, token string, withToken bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %s: want host:port", flag, addr)
	}
	if token != "" || isLoopbackHost(host) {
		return nil
	}
	shown := host
	if shown == "" {
		shown = "every interface"
	}
	if !withToken {
		return fmt.Errorf("%s %s: %s is not a loopback address, and the demo's dashboard, which can change quotas, has no sign-in: bind it to 127.0.0.1", flag, addr, shown)
	}
	return fmt.Errorf("%s %s: %s is not a loopback address, and the dashboard can change quotas: give a token with --auth-token or %s, or bind to 127.0.0.1", flag, addr, shown, dashboardTokenEnv)
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func dashboardURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsUnspecified() {
		_, port, _ := net.SplitHostPort(addr.String())
		return "http://localhost:" + port + "/"
	}
	return "http://" + addr.String() + "/"
}

// The dashboard's HTTP timeouts: its requests are small and quick, so a
// connection that is slow to send, slow to read or idle is let go.
const (
	dashboardReadHeaderTimeout = 10 * time.Second
	dashboardReadTimeout       = 30 * time.Second
	dashboardWriteTimeout      = time.Minute
	dashboardIdleTimeout       = 2 * time.Minute
)

// dashboardServer is the http.Server the dashboard runs in.
func dashboardServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: dashboardReadHeaderTimeout,
		ReadTimeout:       dashboardReadTimeout,
		WriteTimeout:      dashboardWriteTimeout,
		IdleTimeout:       dashboardIdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}
}

// serveDashboard serves h on ln until ctx is done, then shuts down.
func serveDashboard(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := dashboardServer(h)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// demoDashboard serves the dashboard on the demo's Redis, keys and queue,
// with rates from the demo's own metrics. stop ends it.
func (a *app) demoDashboard(ctx context.Context, addr string, rdb redis.UniversalClient, cfg redisConfig, dc demo.Config, reg prometheus.Gatherer) (stop func(), url string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--dashboard-addr: %w", err)
	}
	srv, err := dashboard.New(dashboard.Config{
		Redis: rdb, Asynq: connOpt{cfg}, Queue: dc.Queue, Prefix: dc.Prefix, Timeout: a.timeout,
		Sources: []dashboard.Source{dashboard.Gatherer("demo", reg)},
		Every:   time.Second,
		Logger:  slog.New(slog.NewTextHandler(a.stderr, nil)),
	})
	if err != nil {
		ln.Close()
		return nil, "", err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = serveDashboard(sctx, ln, srv)
	}()
	return func() {
		cancel()
		<-done
		_ = srv.Close()
	}, dashboardURL(ln.Addr()), nil
}
