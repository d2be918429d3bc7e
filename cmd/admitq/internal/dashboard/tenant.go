package dashboard

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/cmd/admitq/internal/quotainput"
)

// maxTimelineEntries bounds the log entries a tenant page reads.
const maxTimelineEntries = 5000

func pathEscape(s string) string { return url.PathEscape(s) }

// formPage is the data of a tenant's page, the default's, and a quota form
// sent back with its errors.
type formPage struct {
	Tenant    string // "" for the default
	IsDefault bool
	New       bool // the tenant name is a field: the form on the tenants page came back
	Own       string
	Default   string
	Paused    bool // the tenant's own quota is paused (or, on the default's page, the default)
	CanPause  bool // a tenant page: it has a quota of its own or a default to pause with
	Values    map[string]string
	Errors    map[string]string
	Error     string
	Saved     string
	Warning   string // what the quota shown does that its setter may not expect
	CSRF      string
	ReadOnly  bool
	Token     bool
	Asynq     bool
	Queue     string
	Every     int64
}

func (s *Server) formPage(w http.ResponseWriter, r *http.Request, tenant string, isDefault bool) formPage {
	p := formPage{
		Tenant: tenant, IsDefault: isDefault, CSRF: s.csrfToken(w, r), ReadOnly: s.cfg.ReadOnly, Token: s.cfg.Token != "",
		Asynq: s.mon != nil, Queue: s.cfg.Queue, Every: s.cfg.Every.Milliseconds(),
		Values: map[string]string{"mode": "log", "max-delay": "0s", "max-in-flight": "0", "max-parked": "0"}, Errors: map[string]string{},
		Saved: r.URL.Query().Get("saved"),
	}
	ctx := r.Context()
	if def, err := s.quotas.GetDefault(ctx); err == nil {
		p.Default = def.String()
		p.Values = quotaValues(def)
		if isDefault {
			p.Warning = quotaWarning(def)
			p.Paused = def.Paused
		}
	} else if !errors.Is(err, admission.ErrNoQuota) {
		p.Error = errorText(err)
	}
	if !isDefault {
		switch q, err := s.quotas.Get(ctx, tenant); {
		case err == nil:
			p.Own = q.String()
			p.Values = quotaValues(q)
			p.Warning = quotaWarning(q)
			p.Paused = q.Paused
		case !errors.Is(err, admission.ErrNoQuota):
			p.Error = errorText(err)
		}
		p.CanPause = p.Own != "" || p.Default != ""
	}
	return p
}

// quotaWarning is the command's warning about q (quotainput.Warning), with
// the form's field name for the flag's.
func quotaWarning(q admission.Quota) string {
	return strings.Replace(quotainput.Warning(q), "--max-delay ", "Max delay ", 1)
}

func quotaValues(q admission.Quota) map[string]string {
	return map[string]string{
		"limit": itoa(q.Limit), "window": q.Window.String(), "max-delay": q.MaxDelay.String(), "mode": q.Mode.String(),
		"max-in-flight": itoa(q.MaxInFlight), "max-parked": itoa(q.MaxParked), "weight": formatWeight(q.Weight),
	}
}

func (s *Server) handleTenant(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("tenant")
	if err := admission.ValidateTenant(tenant); err != nil {
		http.Error(w, errorText(err), http.StatusNotFound)
		return
	}
	s.render(w, http.StatusOK, "tenant.html", s.formPage(w, r, tenant, false))
}

func (s *Server) handleDefault(w http.ResponseWriter, r *http.Request) {
	s.render(w, http.StatusOK, "tenant.html", s.formPage(w, r, "", true))
}

// tenantView is a tenant page's refresh: its window as a timeline, its
// newest entries with their tasks, and its rates.
type tenantView struct {
	Tenant   string  `json:"tenant"` // defaultKey for the default's: its key in Rates.Series
	Now      int64   `json:"now"`    // Redis time, unix ms
	Quota    string  `json:"quota"`
	Limit    int     `json:"limit"`
	WindowMs int64   `json:"window_ms"`
	Mode     string  `json:"mode"`
	InWindow int     `json:"in_window"`
	Reserved int     `json:"reserved"`
	NextFree int64   `json:"next_free_ms"`
	Depth    *depth  `json:"depth,omitempty"` // nil without a cap
	Slots    []int64 `json:"slots"`           // unix ms of each entry in the window or ahead, oldest first
	Cut      bool    `json:"cut"`             // more entries than maxTimelineEntries
	Entries  []entry `json:"entries"`
	Rates    view    `json:"rates"`
	Error    string  `json:"error,omitempty"`
	NoQuota  bool    `json:"no_quota,omitempty"` // no quota of its own and no default
}

type entry struct {
	ID   string `json:"id"`
	At   int64  `json:"at"` // unix ms
	Task string `json:"task,omitempty"`
}

// handleTenantAPI answers a tenant page's refresh: ?t=tenant, or
// ?default=1 for the default's page. The default has a parameter of its
// own, since any name could be a tenant's.
func (s *Server) handleTenantAPI(w http.ResponseWriter, r *http.Request) {
	tenant := r.URL.Query().Get("t")
	since, _ := parseInt(r.URL.Query().Get("since"))
	v := tenantView{Tenant: tenant, Slots: []int64{}, Entries: []entry{}}
	if r.URL.Query().Get("default") == "1" {
		v.Tenant = defaultKey
		list, err := s.tenantsList(r.Context())
		if err != nil {
			v.Error = errorText(err)
		} else {
			v.Rates = s.rates.view(nil, since, true, list.own)
		}
		writeJSON(w, v)
		return
	}
	if err := admission.ValidateTenant(tenant); err != nil {
		v.Error = errorText(err)
		writeJSON(w, v)
		return
	}
	v.Rates = s.rates.view([]string{tenant}, since, false, nil)
	u, err := s.gate.Usage(r.Context(), tenant)
	if errors.Is(err, admission.ErrNoQuota) {
		v.NoQuota = true // the page's lead says so; it is not a failure
		writeJSON(w, v)
		return
	}
	if err != nil {
		v.Error = errorText(err)
		writeJSON(w, v)
		return
	}
	v.Now, v.Quota, v.Limit, v.WindowMs, v.Mode = u.Now.UnixMilli(), u.Quota.String(), u.Quota.Limit, u.Quota.Window.Milliseconds(), u.Quota.Mode.String()
	v.InWindow, v.Reserved = u.InWindow, u.Reserved
	v.Depth = depthOf(u, s.dispatchState(r.Context())[tenant], u.Now)
	if d := u.NextFree.Sub(u.Now); d > 0 {
		v.NextFree = max(d.Milliseconds(), 1)
	}
	if u.Quota.Mode == admission.Log {
		if err := s.timeline(r.Context(), tenant, u, &v); err != nil {
			v.Error = errorText(err)
		}
	}
	writeJSON(w, v)
}

// timeline reads the tenant's log: the newest entries, those still in the
// window or ahead of it. One ZRANGE, bounded by maxTimelineEntries.
func (s *Server) timeline(ctx context.Context, tenant string, u admission.Usage, v *tenantView) error {
	// The key is the one DESIGN.md's key table names for the log.
	key := s.cfg.Prefix + ":{" + tenant + "}:log"
	zs, err := s.cfg.Redis.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: key, Start: -maxTimelineEntries, Stop: -1}).Result()
	if err != nil {
		return err
	}
	from := u.Now.Add(-u.Quota.Window).UnixMicro()
	v.Cut = len(zs) == maxTimelineEntries
	for _, z := range zs {
		if int64(z.Score) <= from {
			continue // left the window; the next admission drops it
		}
		v.Slots = append(v.Slots, int64(z.Score)/1000)
	}
	// The newest entries, newest first, each linked to its task: enqueue
	// uses the entry ID as the asynq task ID.
	for i := len(zs) - 1; i >= 0 && len(v.Entries) < 20; i-- {
		id, _ := zs[i].Member.(string)
		if int64(zs[i].Score) <= from {
			break
		}
		e := entry{ID: id, At: int64(zs[i].Score) / 1000}
		if s.mon != nil {
			e.Task = "/asynq/queues/" + pathEscape(s.cfg.Queue) + "/tasks/" + pathEscape(id)
		}
		v.Entries = append(v.Entries, e)
	}
	return nil
}

// handleQuota sets or deletes a tenant's quota or the default, from a form.
func (s *Server) handleQuota(w http.ResponseWriter, r *http.Request) {
	if !s.writable(w, r) {
		return
	}
	isDefault := r.PostFormValue("default") == "1"
	tenant := r.PostFormValue("tenant")
	action := r.PostFormValue("action")
	back := func(status int, p formPage) {
		for _, f := range quotainput.Fields() {
			p.Values[f] = r.PostFormValue(f)
		}
		s.render(w, status, "tenant.html", p)
	}
	if !isDefault {
		if err := admission.ValidateTenant(tenant); err != nil {
			p := s.formPage(w, r, "", false)
			p.New, p.Tenant = true, tenant
			p.Errors["tenant"] = errorText(err)
			back(http.StatusBadRequest, p)
			return
		}
	}
	ctx := r.Context()
	who := s.actor(r)
	// Whose quota, for the log: a tenant may be named "(default)".
	whose := slog.String("tenant", tenant)
	if isDefault {
		whose = slog.Bool("default", true)
	}
	switch action {
	case "delete":
		var err error
		if isDefault {
			err = s.quotas.DeleteDefault(ctx)
		} else {
			err = s.quotas.Delete(ctx, tenant)
		}
		if err != nil {
			p := s.formPage(w, r, tenant, isDefault)
			p.Error = errorText(err)
			back(http.StatusInternalServerError, p)
			return
		}
		s.log.Info("dashboard: quota deleted", whose, "by", who)
		s.forgetList()
		deleted := "deleted=" + url.QueryEscape(tenant)
		if isDefault {
			deleted = "deleted-default=1"
		}
		http.Redirect(w, r, "/?"+deleted, http.StatusSeeOther)
		return
	case "pause", "resume":
		s.pauseTenant(w, r, tenant, isDefault, action == "pause")
		return
	case "set":
	default:
		http.Error(w, "action: want set, delete, pause or resume", http.StatusBadRequest)
		return
	}
	q, fieldErrs, err := parseQuotaForm(r)
	if err != nil {
		p := s.formPage(w, r, tenant, isDefault)
		p.New = r.PostFormValue("new") == "1"
		for f, e := range fieldErrs {
			p.Errors[f] = e
		}
		if len(fieldErrs) == 0 {
			p.Error = errorText(err)
		}
		back(http.StatusBadRequest, p)
		return
	}
	// A paused quota stays paused through an edit, as with admitq quota
	// set: the form has no Paused field, and resuming is a button of its own.
	var old admission.Quota
	var oldErr error
	if isDefault {
		old, oldErr = s.quotas.GetDefault(ctx)
	} else {
		old, oldErr = s.quotas.Get(ctx, tenant)
	}
	switch {
	case oldErr == nil:
		q.Paused = old.Paused
	case !errors.Is(oldErr, admission.ErrNoQuota):
		p := s.formPage(w, r, tenant, isDefault)
		p.Error = errorText(oldErr)
		back(http.StatusInternalServerError, p)
		return
	}
	if isDefault {
		err = s.quotas.SetDefault(ctx, q)
	} else {
		err = s.quotas.Set(ctx, tenant, q)
	}
	if err != nil {
		p := s.formPage(w, r, tenant, isDefault)
		p.Error = errorText(err)
		back(http.StatusInternalServerError, p)
		return
	}
	s.log.Info("dashboard: quota set", whose, "quota", q.String(), "by", who)
	s.forgetList()
	to := "/default"
	if !isDefault {
		to = "/tenants/" + pathEscape(tenant)
	}
	http.Redirect(w, r, to+"?saved="+url.QueryEscape(q.String()), http.StatusSeeOther)
}

func (s *Server) handleLoginForm(w http.ResponseWriter, r *http.Request) {
	s.render(w, http.StatusOK, "login.html", map[string]any{"Next": safeNext(r.URL.Query().Get("next")), "Token": s.cfg.Token != ""})
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	if status, err := parseForm(w, r); err != nil {
		http.Error(w, err.Error(), status)
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	if s.cfg.Token == "" {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	client := s.clientAddr(r)
	ok, wait := s.checkToken(r, client, r.PostForm.Get("token"))
	if wait > 0 {
		s.log.Warn("dashboard: sign-in attempts over the limit", "from", client)
		w.Header().Set("Retry-After", retryAfter(wait))
		s.render(w, http.StatusTooManyRequests, "login.html", map[string]any{"Next": next, "Token": true,
			"Error": "Too many sign-in attempts from your address: try again in " + retryAfter(wait) + " s."})
		return
	}
	if !ok {
		s.log.Warn("dashboard: sign-in with a wrong token", "from", client)
		s.render(w, http.StatusUnauthorized, "login.html", map[string]any{"Next": next, "Token": true, "Error": "That is not the dashboard's token."})
		return
	}
	id, exp := s.sessions.create(time.Now())
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: s.secure(r),
		SameSite: http.SameSiteStrictMode, Expires: exp, MaxAge: int(s.sessions.ttl.Seconds()),
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// handleLogout ends the session on the server, so that a copy of the
// cookie kept elsewhere is worth nothing either.
func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.end(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: s.secure(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// pauseTenant sets (pause) or clears the Paused of tenant's quota, as
// admitq quota pause and resume do: a tenant on the default is paused
// with a copy of the default; one with no quota and no default is refused
// already, so there is nothing to pause; resuming a tenant without a quota
// of its own changes nothing. handleQuota has checked the token, CSRF and
// read-only rules and parsed the form.
func (s *Server) pauseTenant(w http.ResponseWriter, r *http.Request, tenant string, isDefault, pause bool) {
	if isDefault {
		http.Error(w, "pause and resume are for a tenant, not the default", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	fail := func(status int, msg string) {
		p := s.formPage(w, r, tenant, false)
		p.Error = msg
		s.render(w, status, "tenant.html", p)
	}
	q, err := s.quotas.Get(ctx, tenant)
	fromDefault := false
	switch {
	case errors.Is(err, admission.ErrNoQuota) && !pause:
		fail(http.StatusConflict, "This tenant has no quota of its own, so it is not paused; nothing changed.")
		return
	case errors.Is(err, admission.ErrNoQuota):
		d, derr := s.quotas.GetDefault(ctx)
		if errors.Is(derr, admission.ErrNoQuota) {
			fail(http.StatusConflict, "This tenant has no quota and there is no default: its tasks are refused already; nothing paused.")
			return
		}
		if derr != nil {
			fail(http.StatusInternalServerError, errorText(derr))
			return
		}
		q, fromDefault = d, true
	case err != nil:
		fail(http.StatusInternalServerError, errorText(err))
		return
	}
	if q.Paused != pause || fromDefault {
		q.Paused = pause
		if err := s.quotas.Set(ctx, tenant, q); err != nil {
			fail(http.StatusInternalServerError, errorText(err))
			return
		}
		msg := "dashboard: tenant resumed"
		if pause {
			msg = "dashboard: tenant paused"
		}
		s.log.Info(msg, "tenant", tenant, "quota", q.String(), "by", s.actor(r))
		s.forgetList()
	}
	http.Redirect(w, r, "/tenants/"+pathEscape(tenant)+"?saved="+url.QueryEscape(q.String()), http.StatusSeeOther)
}
