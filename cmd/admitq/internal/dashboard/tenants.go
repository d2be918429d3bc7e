package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/metrics"
)

// DefaultRow is the label of the default quota's row, which shows the sum
// of the rates of tenants without a quota of their own. It is a label only:
// a tenant may be named "(default)" too, and has a row, a page and a quota
// of its own. The default's row is keyed by defaultKey.
const DefaultRow = "(default)"

// defaultKey keys the default's row and its rates (view.Series), where a
// tenant's are keyed by its name. It is empty, which
// admission.ValidateTenant refuses, so no tenant has it; RedisQuotas keeps
// the default under the same name.
const defaultKey = ""

// tenantList is every quota, read by RedisQuotas.List (HSCAN pages), and
// the tenants on the default with a window in Redis (Gate.ScanTenants, as
// admitq status lists them), reused for listTTL.
type tenantList struct {
	read    time.Time
	scanned time.Time       // when windows was read
	windows map[string]bool // tenants with a window in Redis
	names   []string        // tenants with a quota of their own, sorted
	own     map[string]bool // the same, as a set
	active  []string        // tenants without a quota of their own whose window is in Redis, sorted
	listed  []string        // names and active, sorted
	quotas  admission.StaticQuotas
	capped  bool // some quota, or the default, has a MaxInFlight
}

// tenantsList returns the quotas. The first call reads them; later ones get
// the last list at once and, when it is older than listTTL, start one read
// in the background, so that no page waits for the read that grows with
// every tenant.
func (s *Server) tenantsList(ctx context.Context) (*tenantList, error) {
	s.listMu.Lock()
	l := s.list
	if l != nil {
		if time.Since(l.read) >= s.listTTL && !s.listReading {
			s.listReading = true
			s.bg.Add(1)
			go func() {
				defer s.bg.Done()
				_, _ = s.readList(s.bgCtx)
			}()
		}
		s.listMu.Unlock()
		return l, nil
	}
	s.listMu.Unlock()
	return s.readList(ctx)
}

// readList reads every quota and keeps the list, unless a write here made
// it stale while it was being read.
func (s *Server) readList(ctx context.Context) (*tenantList, error) {
	s.listMu.Lock()
	gen := s.listGen
	var windows map[string]bool
	var scanned time.Time
	if s.list != nil && time.Since(s.list.scanned) < activeTTL {
		windows, scanned = s.list.windows, s.list.scanned
	}
	s.listMu.Unlock()
	var all admission.StaticQuotas
	var qerr, kerr error
	var wg sync.WaitGroup
	wg.Go(func() { all, qerr = s.quotas.List(ctx) })
	if windows == nil {
		windows, scanned = map[string]bool{}, time.Now()
		wg.Go(func() {
			var mu sync.Mutex // ScanTenants calls fn from a goroutine per cluster master
			kerr = s.gate.ScanTenants(ctx, "*", func(t string) error {
				mu.Lock()
				windows[t] = true
				mu.Unlock()
				return nil
			})
		})
	}
	wg.Wait()
	s.listMu.Lock()
	defer s.listMu.Unlock()
	s.listReading = false
	if qerr != nil {
		return nil, qerr
	}
	if kerr != nil {
		// The quotas are the page; tenants on the default are a bonus, and
		// the metrics still name the active ones. Try again in activeTTL.
		s.log.Warn("dashboard: finding the tenants with a window in Redis", "err", kerr)
	}
	l := &tenantList{read: time.Now(), scanned: scanned, windows: windows, quotas: all, names: make([]string, 0, len(all.Tenants)), own: make(map[string]bool, len(all.Tenants))}
	l.capped = all.Default != nil && all.Default.MaxInFlight > 0
	for t, q := range all.Tenants {
		l.names = append(l.names, t)
		l.own[t] = true
		l.capped = l.capped || q.MaxInFlight > 0
	}
	slices.Sort(l.names)
	for t := range windows {
		if !l.own[t] {
			l.active = append(l.active, t)
		}
	}
	slices.Sort(l.active)
	l.listed = l.names
	if len(l.active) > 0 {
		l.listed = append(slices.Clone(l.names), l.active...)
		slices.Sort(l.listed)
	}
	if gen == s.listGen {
		s.list = l
	}
	return l, nil
}

// forgetList makes the next page read the quotas again: after a write here.
func (s *Server) forgetList() {
	s.listMu.Lock()
	s.list = nil
	s.listGen++
	s.listMu.Unlock()
	s.forgetDispatch()
}

// forgetDispatch makes the next page read the dispatcher again: after a
// write here that changes what it holds (a pause).
func (s *Server) forgetDispatch() {
	s.dispMu.Lock()
	s.dispRead = time.Time{}
	s.dispMu.Unlock()
}

// listQuotas answers the gate's quota lookups from the tenant list.
type listQuotas struct{ s *Server }

func (l listQuotas) Quota(ctx context.Context, tenant string) (admission.Quota, error) {
	list, err := l.s.tenantsList(ctx)
	if err != nil {
		return admission.Quota{}, err
	}
	return list.quotas.Quota(ctx, tenant)
}

// row is one tenant's line on the tenants page.
type row struct {
	Tenant    string  `json:"tenant"` // DefaultRow for the default's row
	Shown     string  `json:"shown"`  // the name as the table shows it: see shownTenant
	Key       string  `json:"key"`    // the tenant, or defaultKey: the row's key in Rates.Series
	OnDefault bool    `json:"on_default,omitempty"`
	NoQuota   bool    `json:"no_quota,omitempty"` // no quota of its own and no default: the gate refuses its tasks
	Paused    bool    `json:"paused,omitempty"`   // its quota (its own, or the default it is on) is paused
	Quota     string  `json:"quota"`
	Limit     int     `json:"limit"`
	Mode      string  `json:"mode"`
	InWindow  int     `json:"in_window"`
	Reserved  int     `json:"reserved"`
	NextFree  int64   `json:"next_free_ms"`    // after now; 0 when a request would be admitted now
	Depth     *depth  `json:"depth,omitempty"` // nil without a cap
	Flags     flags   `json:"flags"`
	Error     string  `json:"error,omitempty"`
	Others    int     `json:"others,omitempty"` // default row: tenants without a quota seen in the rates
	Link      string  `json:"link"`
	Usage     float64 `json:"usage"` // in window / limit
}

// tenantsPage is the data of the tenants page and of each refresh.
type tenantsPage struct {
	Now      int64  `json:"now"` // Redis time, unix ms
	Query    string `json:"query"`
	Flagged  bool   `json:"flagged"`
	Page     int    `json:"page"` // from 1
	Pages    int    `json:"pages"`
	Total    int    `json:"total"`      // tenants matching the query
	All      int    `json:"all"`        // tenants with a quota of their own
	Others   int    `json:"on_default"` // tenants listed without one, while there is a default: a window in Redis, or seen in the rates
	NoQuota  int    `json:"no_quota"`   // the same while there is no default: they have no quota at all
	PageSize int    `json:"page_size"`
	Every    int64  `json:"every_ms"`
	HasDepth bool   `json:"has_depth"` // some tenant is capped: show the depth columns
	ReadOnly bool   `json:"read_only"`
	Asynq    bool   `json:"asynq"`
	Token    bool   `json:"token"`
	Sources  int    `json:"sources"`
	Default  *row   `json:"default"` // nil when there is no default quota
	Rows     []row  `json:"rows"`
	Rates    view   `json:"rates"`
	Error    string `json:"error,omitempty"`
	// Warnings are about Redis and the queues, not a tenant: an evicting
	// maxmemory-policy, tasks parked where no worker with a gate serves.
	Warnings []string `json:"warnings"`
}

// usageParallel bounds the concurrent Usage calls of one refresh.
const usageParallel = 8

func (s *Server) tenantsPage(ctx context.Context, query string, page int, flagged bool, since int64) (tenantsPage, error) {
	p := tenantsPage{
		Query: query, Flagged: flagged, PageSize: s.cfg.PageSize, Every: s.cfg.Every.Milliseconds(),
		ReadOnly: s.cfg.ReadOnly, Asynq: s.mon != nil, Token: s.cfg.Token != "", Sources: len(s.cfg.Sources),
		Rows: []row{},
	}
	list, err := s.tenantsList(ctx)
	if err != nil {
		return p, err
	}
	p.All = len(list.names)
	p.HasDepth = list.capped
	var hot map[string]bool
	if flagged {
		hot = s.rates.flagged()
	}
	// Tenants on the default are listed too: those with a window in Redis,
	// and those the metrics saw in the charts' history.
	listed := list.listed
	others := len(list.active)
	if seen := s.rates.tenantsNotIn(list.own); len(seen) > 0 {
		inList := make(map[string]bool, len(list.active))
		for _, t := range list.active {
			inList[t] = true
		}
		var extra []string
		for _, t := range seen {
			// OtherTenant counts the tenants past the metrics' bound: no one's.
			if !inList[t] && t != metrics.OtherTenant && admission.ValidateTenant(t) == nil {
				extra = append(extra, t)
			}
		}
		if len(extra) > 0 {
			listed = append(slices.Clone(listed), extra...)
			slices.Sort(listed)
			others += len(extra)
		}
	}
	if list.quotas.Default != nil {
		p.Others = others
	} else {
		p.NoQuota = others
	}
	matches := listed
	if query != "" || flagged {
		q := strings.ToLower(query)
		matches = nil
		for _, t := range listed {
			if (q == "" || strings.Contains(strings.ToLower(t), q)) && (!flagged || hot[t]) {
				matches = append(matches, t)
			}
		}
	}
	p.Total = len(matches)
	p.Pages = max(1, (p.Total+p.PageSize-1)/p.PageSize)
	p.Page = min(max(page, 1), p.Pages)
	lo := (p.Page - 1) * p.PageSize
	shown := matches[lo:min(lo+p.PageSize, len(matches))]

	p.Rows = make([]row, len(shown))
	disp := s.dispatchState(ctx)
	p.Warnings = s.warnings(ctx)
	var wg sync.WaitGroup
	sem := make(chan struct{}, usageParallel)
	var nowMu sync.Mutex
	for i, t := range shown {
		r := row{Tenant: t, Shown: shownTenant(t), Key: t, Link: "/tenants/" + pathEscape(t)}
		if q, own := list.quotas.Tenants[t]; own {
			r.Quota, r.Limit, r.Mode, r.Paused = q.String(), q.Limit, q.Mode.String(), q.Paused
		} else if d := list.quotas.Default; d != nil {
			r.OnDefault = true
			r.Quota, r.Limit, r.Mode, r.Paused = d.String()+" (default)", d.Limit, d.Mode.String(), d.Paused
		} else {
			r.NoQuota = true
			r.Quota = "no quota"
		}
		p.Rows[i] = r
		if r.NoQuota {
			continue // Usage would only say ErrNoQuota: the row says it already
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			u, err := s.gate.Usage(ctx, t)
			r := &p.Rows[i]
			if err != nil {
				r.Error = errorText(err)
				return
			}
			r.InWindow, r.Reserved = u.InWindow, u.Reserved
			r.Depth = depthOf(u, disp[t], u.Now)
			r.Usage = float64(u.InWindow) / float64(max(u.Quota.Limit, 1))
			if d := u.NextFree.Sub(u.Now); d > 0 {
				r.NextFree = max(d.Milliseconds(), 1)
			}
			nowMu.Lock()
			p.Now = max(p.Now, u.Now.UnixMilli())
			nowMu.Unlock()
		})
	}
	wg.Wait()
	if p.Now == 0 {
		if now, err := s.cfg.Redis.Time(ctx).Result(); err == nil {
			p.Now = now.UnixMilli()
		}
	}

	d := list.quotas.Default
	if d != nil {
		p.Default = &row{Tenant: DefaultRow, Shown: DefaultRow, Key: defaultKey, Quota: d.String(), Limit: d.Limit, Mode: d.Mode.String(), Link: "/default", Others: others, Paused: d.Paused}
	}
	p.Rates = s.rates.view(shown, since, d != nil, list.own)
	for i := range p.Rows {
		p.Rows[i].Flags = p.Rates.Flags[p.Rows[i].Tenant]
	}
	return p, nil
}

// tableTenantWidth is the widest a tenant name is shown in the table, as
// in the command's tables: a name may be 256 bytes long.
const tableTenantWidth = 40

// shownTenant is a tenant's name as the tenants table shows it, as admitq
// quota list does: quoted (Go syntax) when it begins with "(" or a double
// quote, so that no tenant reads as the default's row, "(default)", then
// shortened to tableTenantWidth characters with an ellipsis. The page and
// the JSON carry the whole name.
func shownTenant(tenant string) string {
	if strings.HasPrefix(tenant, "(") || strings.HasPrefix(tenant, `"`) {
		tenant = strconv.Quote(tenant)
	}
	if utf8.RuneCountInString(tenant) <= tableTenantWidth {
		return tenant
	}
	return string([]rune(tenant)[:tableTenantWidth-1]) + "…"
}

func (s *Server) pageParams(r *http.Request) (query string, page int, flagged bool, since int64) {
	v := r.URL.Query()
	page, _ = strconv.Atoi(v.Get("page"))
	since, _ = strconv.ParseInt(v.Get("since"), 10, 64)
	return strings.TrimSpace(v.Get("q")), page, v.Get("flagged") == "1", since
}

func (s *Server) handleTenants(w http.ResponseWriter, r *http.Request) {
	query, page, flagged, _ := s.pageParams(r)
	p, err := s.tenantsPage(r.Context(), query, page, flagged, 0)
	if err != nil {
		p.Error = errorText(err)
	}
	s.render(w, http.StatusOK, "tenants.html", map[string]any{
		"Page": p, "CSRF": s.csrfToken(w, r), "Rules": flagRules(s.cfg.Every),
		"Form": map[string]any{"Values": map[string]string{"mode": "log", "max-delay": "0s", "max-in-flight": "0", "max-parked": "0"}, "Errors": map[string]string{}},
	})
}

func (s *Server) handleTenantsAPI(w http.ResponseWriter, r *http.Request) {
	query, page, flagged, since := s.pageParams(r)
	p, err := s.tenantsPage(r.Context(), query, page, flagged, since)
	if err != nil {
		p.Error = errorText(err)
	}
	writeJSON(w, p)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

// errorText is an error for a page: admitq's errors name no secret, and
// go-redis's name the server, never its password.
func errorText(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "Redis did not answer in time"
	}
	return strings.TrimPrefix(err.Error(), "admitq: ")
}

// flagRules is the flag rule as the page states it.
func flagRules(every time.Duration) string {
	return fmt.Sprintf("at limit: in more than %.0f%% of the %v intervals in which it got decisions (at least %d), some were deferred or rejected; "+
		"most worker time: its tasks took more than %.0f%% of all tenants' worker seconds while another tenant ran tasks too. Both over the charts' last minutes.",
		atLimitPart*100, every, minIntervals, hogPart*100)
}
