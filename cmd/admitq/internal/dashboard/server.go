package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
)

//go:embed static templates
var assets embed.FS

// Defaults of Config's zero values.
const (
	DefaultPageSize = 50
	DefaultEvery    = 2 * time.Second
	DefaultHistory  = 5 * time.Minute
	// listTTL is how long the list of tenants with a quota is reused: the
	// one read that grows with every tenant, not only those shown.
	listTTL = 5 * time.Second
	// activeTTL is how long the tenants with a window in Redis are reused:
	// finding them SCANs every key, asynq's included, so less often than
	// the quotas. The metrics name the tenants active since meanwhile.
	activeTTL = 30 * time.Second
)

// depth is a tenant's part of the dispatched worker queues: its tasks
// pending or active against its cap, those parked behind the cap or their
// turn, and its share of worker time against its weight.
type depth struct {
	InFlight int  `json:"in_flight"`
	Cap      int  `json:"cap"` // 0: no cap
	AtCap    bool `json:"at_cap"`
	// OverCap: more in flight than the cap, which was just lowered; the
	// excess drains as its tasks end.
	OverCap   bool    `json:"over_cap"`
	Parked    int     `json:"parked"`
	MaxParked int     `json:"max_parked"`                 // the effective bound
	OldestAge int64   `json:"oldest_parked_ms,omitempty"` // how long the first parked task has waited; 0 when none is
	Weight    float64 `json:"weight"`
	Share     float64 `json:"worker_share"` // of the worker time of the tenants active in its queues, 0 to 1
	// Held: its parked tasks are held back for a while in some queue, by
	// its rate or a downstream throttle (worker.Throttled).
	Held bool `json:"held,omitempty"`
}

// depthOf is the tenant of u's depth, from what the dispatcher holds (ts,
// summed over its queues); nil when it has no cap and nothing there.
func depthOf(u admission.Usage, ts dispatch.TenantStats, now time.Time) *depth {
	active := ts.Waiting > 0 || ts.InFlight > 0
	if u.Quota.MaxInFlight == 0 && !active {
		return nil
	}
	d := &depth{InFlight: ts.InFlight, Cap: u.Quota.MaxInFlight, Parked: ts.Waiting, MaxParked: u.Quota.MaxParked,
		Weight: u.Quota.EffectiveWeight(), Share: ts.Share, Held: ts.Held}
	d.AtCap = d.Cap > 0 && d.InFlight >= d.Cap
	d.OverCap = d.Cap > 0 && d.InFlight > d.Cap
	if d.MaxParked == 0 {
		d.MaxParked = admission.DefaultMaxParked
	}
	if !ts.OldestWaiting.IsZero() {
		d.OldestAge = max(now.Sub(ts.OldestWaiting).Milliseconds(), 1)
	}
	return d
}

// warnings returns what an operator must know of Redis and the queues,
// read with the dispatch state: a maxmemory-policy that evicts (read at
// most once a minute), and queues where tasks are parked and no worker
// with a gate serves.
func (s *Server) warnings(ctx context.Context) []string {
	s.dispMu.Lock()
	unserved := slices.Clone(s.unserved)
	if time.Since(s.policyRead) > time.Minute {
		s.policyRead = time.Now()
		s.evicting = s.evicting[:0]
		if policies, err := admission.MaxmemoryPolicy(ctx, s.cfg.Redis); err == nil {
			for _, addr := range slices.Sorted(maps.Keys(policies)) {
				if p := policies[addr]; p != admission.NoEviction {
					s.evicting = append(s.evicting, fmt.Sprintf("Redis %s has maxmemory-policy %s: once full it evicts tenants' logs and every bound breaks silently. Set it to noeviction.", addr, p))
				}
			}
		}
	}
	out := append(slices.Clone(s.evicting), unserved...)
	s.dispMu.Unlock()
	if out == nil {
		out = []string{}
	}
	return out
}

// dispatchState returns what the dispatcher holds per tenant, summed over
// the dispatched queues, read at most once a second.
func (s *Server) dispatchState(ctx context.Context) map[string]dispatch.TenantStats {
	s.dispMu.Lock()
	defer s.dispMu.Unlock()
	s.readDispatch(ctx)
	return s.dispByTenant
}

// dispatchQueues returns what the dispatcher holds per queue, read at most
// once a second (with dispatchState).
func (s *Server) dispatchQueues(ctx context.Context) []dispatch.QueueStats {
	s.dispMu.Lock()
	defer s.dispMu.Unlock()
	s.readDispatch(ctx)
	return s.dispQueues
}

// readDispatch reads every dispatched queue's state, unless it did less
// than a second ago, and sums it by tenant. It keeps the last reading
// when Redis fails. Call it with dispMu held.
func (s *Server) readDispatch(ctx context.Context) {
	if time.Since(s.dispRead) < time.Second {
		return
	}
	all, err := s.queueStats(ctx)
	if err != nil {
		return
	}
	by := map[string]dispatch.TenantStats{}
	s.unserved = s.unserved[:0]
	for _, qs := range all {
		q := qs.Queue
		parked := 0
		for _, t := range qs.Tenants {
			parked += t.Waiting
		}
		if parked > 0 && qs.Workers == 0 {
			s.unserved = append(s.unserved, fmt.Sprintf("Queue %q has %d parked tasks and no worker with a Gate serves it: none moves until one does.", q, parked))
		}
		if qs.Fair && qs.Ungated > 0 {
			s.unserved = append(s.unserved, fmt.Sprintf("Fair queue %q is also processed by %d asynq servers without a Gate: they take its tasks out of turn and add no room to it.", q, qs.Ungated))
		}
		for _, t := range qs.Tenants {
			a := by[t.Tenant]
			a.Tenant = t.Tenant
			a.Waiting += t.Waiting
			a.InFlight += t.InFlight
			a.Share = max(a.Share, t.Share)
			a.Held = a.Held || t.Held
			if a.OldestWaiting.IsZero() || !t.OldestWaiting.IsZero() && t.OldestWaiting.Before(a.OldestWaiting) {
				a.OldestWaiting = t.OldestWaiting
			}
			by[t.Tenant] = a
		}
	}
	s.dispByTenant, s.dispQueues, s.dispRead = by, all, time.Now()
}

// readQueueStats reads the state of every queue the dispatcher has state
// for, by name. A queue whose state cannot be read is left out.
func (s *Server) readQueueStats(ctx context.Context) ([]dispatch.QueueStats, error) {
	queues, err := s.disp.Queues(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]dispatch.QueueStats, 0, len(queues))
	for _, q := range queues {
		qs, err := s.disp.Stats(ctx, q)
		if err != nil {
			continue
		}
		out = append(out, qs)
	}
	return out, nil
}

// Config says where the dashboard reads and what it allows.
type Config struct {
	// Redis holds the quotas and windows. The caller owns and closes it.
	Redis redis.UniversalClient
	// Asynq is the same Redis for asynqmon, which makes and closes its own
	// client from it. Nil mounts no asynqmon.
	Asynq asynq.RedisConnOpt
	// Queue is the asynq queue the tenants' tasks go to, for links to a
	// task in asynqmon. "" means "default", asynq's own default.
	Queue string
	// Prefix of admitq's keys; "" means "admitq".
	Prefix string
	// Timeout of each Redis call; 0 means admission's default.
	Timeout time.Duration
	// Token, when not "", is needed for every page and every write.
	Token string
	// TrustProxy believes a proxy's X-Forwarded-Proto: https, so that
	// cookies are Secure behind a proxy that ends TLS, and counts sign-in
	// attempts against the client address the proxy saw (the right-most
	// hop of X-Forwarded-For that is not the proxy's, else X-Real-IP)
	// instead of the proxy's. Set it only when every request comes
	// through such a proxy.
	TrustProxy bool
	// ReadOnly refuses every write, here and in asynqmon.
	ReadOnly bool
	// Sources are where decisions and task starts per tenant are counted.
	// None: the charts stay empty and the page says so.
	Sources []Source
	// Logger gets one line per quota change, naming who made it. Nil
	// discards.
	Logger *slog.Logger
	// PageSize is how many tenants a page shows; 0 means DefaultPageSize.
	PageSize int
	// Every is how often the page refreshes and the Sources are sampled;
	// 0 means DefaultEvery.
	Every time.Duration
	// History is how far back the charts go; 0 means DefaultHistory.
	History time.Duration
}

// Server is the dashboard's http.Handler. Close it to stop its sampling.
type Server struct {
	cfg     Config
	mux     *http.ServeMux
	handler http.Handler
	tmpl    *template.Template
	quotas  *admission.RedisQuotas
	gate    *admission.Gate
	disp    *dispatch.Dispatcher

	dispMu       sync.Mutex
	dispRead     time.Time
	dispByTenant map[string]dispatch.TenantStats
	dispQueues   []dispatch.QueueStats // by queue name
	unserved     []string              // warnings of queues with parked tasks and no worker with a gate
	policyRead   time.Time             // when evicting was read
	evicting     []string              // warnings of servers whose maxmemory-policy evicts
	rates        *rates
	mon          *asynqmon.HTTPHandler
	sessions     *sessions
	logins       *loginLimiter
	log          *slog.Logger

	// queueStats reads every dispatched queue's state: readQueueStats, but
	// in tests that hand the dashboard a state of their own.
	queueStats func(context.Context) ([]dispatch.QueueStats, error)

	listMu      sync.Mutex
	list        *tenantList
	listReading bool          // a background read of the list is under way
	listGen     int           // counts writes here, which drop the list
	listTTL     time.Duration // listTTL but in tests

	bgCtx  context.Context // ends at Close
	bg     sync.WaitGroup  // background reads of the list
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Server that samples its Sources until Close.
func New(cfg Config) (*Server, error) {
	if cfg.Redis == nil {
		return nil, errors.New("dashboard: Config.Redis is nil")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "admitq"
	}
	if cfg.Queue == "" {
		cfg.Queue = "default"
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.Every <= 0 {
		cfg.Every = DefaultEvery
	}
	if cfg.History <= 0 {
		cfg.History = DefaultHistory
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := []admission.Option{admission.WithPrefix(cfg.Prefix)}
	if cfg.Timeout > 0 {
		opts = append(opts, admission.WithTimeout(cfg.Timeout))
	}
	tmpl, err := template.New("").Funcs(template.FuncMap{"pathEscape": url.PathEscape}).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	s := &Server{
		cfg:     cfg,
		mux:     http.NewServeMux(),
		tmpl:    tmpl,
		quotas:  admission.NewRedisQuotas(cfg.Redis, opts...),
		rates:   newRates(cfg.Sources, cfg.Every, cfg.History),
		log:     log,
		done:    make(chan struct{}),
		listTTL: listTTL,

		sessions: newSessions(SessionTTL),
		logins:   newLoginLimiter(loginBurst, loginEvery, loginQueue),
	}
	// The gate reads quotas from the list the page already holds, so that a
	// row costs Redis one script call and no quota lookup.
	s.gate = admission.New(cfg.Redis, listQuotas{s}, opts...)
	s.disp = dispatch.New(cfg.Redis, s.gate, nil)
	s.queueStats = s.readQueueStats
	static, _ := fs.Sub(assets, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /{$}", s.handleTenants)
	s.mux.HandleFunc("GET /api/tenants", s.handleTenantsAPI)
	s.mux.HandleFunc("GET /tenants/{tenant}", s.handleTenant)
	s.mux.HandleFunc("GET /default", s.handleDefault)
	s.mux.HandleFunc("GET /api/tenant", s.handleTenantAPI)
	s.mux.HandleFunc("POST /quota", s.handleQuota)
	s.mux.HandleFunc("GET /keys", s.handleKeys)
	s.mux.HandleFunc("GET /keys/{key}", s.handleKey)
	s.mux.HandleFunc("GET /api/keys", s.handleKeysAPI)
	s.mux.HandleFunc("POST /key", s.handleKeyWrite)
	s.mux.HandleFunc("GET /login", s.handleLoginForm)
	s.mux.HandleFunc("POST /login", s.handleLogin)
	s.mux.HandleFunc("POST /logout", s.handleLogout)
	if cfg.Asynq != nil {
		s.mon = asynqmon.New(asynqmon.Options{RootPath: "/asynq", RedisConnOpt: cfg.Asynq, ReadOnly: cfg.ReadOnly})
		s.mux.Handle("/asynq/", s.mon)
		s.mux.Handle("GET /asynq", http.RedirectHandler("/asynq/", http.StatusMovedPermanently))
	}
	s.handler = s.guard(s.mux)

	ctx, cancel := context.WithCancel(context.Background())
	s.bgCtx, s.cancel = ctx, cancel
	go func() {
		defer close(s.done)
		if len(cfg.Sources) > 0 {
			s.rates.run(ctx)
		}
	}()
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Close stops sampling and closes asynqmon's Redis client. The Redis
// client in Config stays open.
func (s *Server) Close() error {
	s.cancel()
	<-s.done
	s.bg.Wait()
	s.gate.Close()
	if s.mon != nil {
		return s.mon.Close()
	}
	return nil
}

func (s *Server) render(w http.ResponseWriter, status int, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'")
	w.WriteHeader(status)
	if err := s.tmpl.ExecuteTemplate(w, name, data); err != nil {
		s.log.Error("dashboard: rendering a page", "page", name, "err", err)
	}
}
