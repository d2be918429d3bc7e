package dashboard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
)

// keyRow is one concurrency key's line in a queue's table: what the
// dispatcher holds of the key there (dispatch.KeyStats).
type keyRow struct {
	Key      string `json:"key"`
	Shown    string `json:"shown"` // the name as the table shows it: see shownTenant
	Link     string `json:"link"`
	InFlight int    `json:"in_flight"`
	Cap      int    `json:"cap"` // 0: no cap
	AtCap    bool   `json:"at_cap"`
	// OverCap: more in flight than the cap, which was just lowered; the
	// excess drains as its tasks end.
	OverCap bool  `json:"over_cap"`
	Waiting int   `json:"waiting"`
	Paused  bool  `json:"paused"`
	Held    bool  `json:"held"`
	HeldMs  int64 `json:"held_ms,omitempty"` // how much longer a downstream throttle holds it; 0 when unknown or over
}

// queueKeys are the keys a dispatched queue lists.
type queueKeys struct {
	Queue string   `json:"queue"`
	Keys  []keyRow `json:"keys"`
	// More: the dispatcher lists at most dispatch.StatsKeys keys a queue,
	// and listed that many: others may have tasks there too.
	More bool `json:"more"`
}

// keyQuotaRow is a key's quota, in the list of keys with one.
type keyQuotaRow struct {
	Key    string `json:"key"`
	Shown  string `json:"shown"`
	Link   string `json:"link"`
	Quota  string `json:"quota"` // keyQuotaText
	Cap    int    `json:"cap"`   // MaxInFlight; 0: no cap
	Paused bool   `json:"paused"`
}

// keysView is the data of the keys page and of a key's page, and of each
// refresh (/api/keys): the dispatched queues' keys, and the key quotas.
type keysView struct {
	Key      string        `json:"key,omitempty"` // a key's page: only its rows
	Queues   []queueKeys   `json:"queues"`        // queues listing a key (the key), by name
	Quotas   []keyQuotaRow `json:"quotas"`        // by key
	Most     int           `json:"most"`          // keys listed a queue at most: dispatch.StatsKeys
	Every    int64         `json:"every_ms"`
	ReadOnly bool          `json:"read_only"`
	Error    string        `json:"error,omitempty"`
}

// keysView reads the keys the dispatched queues list (with the tenants'
// dispatch state, at most once a second) and the key quotas: every one
// (RedisQuotas.ListKeys, a hash of a few entries a key), or only key's
// when key is not "".
func (s *Server) keysView(ctx context.Context, key string) keysView {
	v := keysView{Key: key, Queues: []queueKeys{}, Quotas: []keyQuotaRow{}, Most: dispatch.StatsKeys, Every: s.cfg.Every.Milliseconds(), ReadOnly: s.cfg.ReadOnly}
	for _, qs := range s.dispatchQueues(ctx) {
		qk := queueKeys{Queue: qs.Queue, Keys: []keyRow{}, More: len(qs.Keys) >= dispatch.StatsKeys}
		for _, k := range qs.Keys {
			if key != "" && k.Key != key {
				continue
			}
			r := keyRow{Key: k.Key, Shown: shownTenant(k.Key), Link: keyLink(k.Key), InFlight: k.InFlight, Cap: k.Cap,
				AtCap: k.AtCap, OverCap: k.Cap > 0 && k.InFlight > k.Cap, Waiting: k.Waiting, Paused: k.Paused, Held: k.Held}
			if k.Held && !k.HeldUntil.IsZero() {
				r.HeldMs = max(k.HeldUntil.Sub(qs.Now).Milliseconds(), 0)
			}
			qk.Keys = append(qk.Keys, r)
		}
		if len(qk.Keys) > 0 {
			v.Queues = append(v.Queues, qk)
		}
	}
	quotas := map[string]admission.Quota{}
	var err error
	if key == "" {
		quotas, err = s.quotas.ListKeys(ctx)
	} else {
		var q admission.Quota
		switch q, err = s.quotas.GetKey(ctx, key); {
		case err == nil:
			quotas[key] = q
		case errors.Is(err, admission.ErrNoQuota):
			err = nil
		}
	}
	if err != nil {
		v.Error = errorText(err)
	}
	for _, k := range slices.Sorted(maps.Keys(quotas)) {
		q := quotas[k]
		v.Quotas = append(v.Quotas, keyQuotaRow{Key: k, Shown: shownTenant(k), Link: keyLink(k), Quota: keyQuotaText(q), Cap: q.MaxInFlight, Paused: q.Paused})
	}
	return v
}

func keyLink(key string) string { return "/keys/" + pathEscape(key) }

// keyQuotaText is a key's quota as the pages show it: a key's quota only
// caps and pauses (Quota.ValidateAsKey), so Quota.String's "no limit" and
// parked bound say nothing of it.
func keyQuotaText(q admission.Quota) string {
	s := "no cap"
	if q.MaxInFlight > 0 {
		s = fmt.Sprintf("max in flight %d", q.MaxInFlight)
	}
	if q.Paused {
		s += ", paused"
	}
	return s
}

// keyPage is the data of a key's page, and of the keys page (Key "").
type keyPage struct {
	Key      string
	Own      string // its quota (keyQuotaText); "" when it has none
	Paused   bool
	Saved    string
	Error    string // of a write; Data.Error is the reading's
	CSRF     string
	ReadOnly bool
	Token    bool
	Asynq    bool
	Data     keysView
}

func (s *Server) keyPage(w http.ResponseWriter, r *http.Request, key string) keyPage {
	p := keyPage{Key: key, CSRF: s.csrfToken(w, r), ReadOnly: s.cfg.ReadOnly, Token: s.cfg.Token != "", Asynq: s.mon != nil,
		Saved: r.URL.Query().Get("saved"), Data: s.keysView(r.Context(), key)}
	if key != "" {
		for _, q := range p.Data.Quotas {
			p.Own, p.Paused = q.Quota, q.Paused
		}
	}
	return p
}

func (s *Server) handleKeys(w http.ResponseWriter, r *http.Request) {
	s.render(w, http.StatusOK, "keys.html", s.keyPage(w, r, ""))
}

func (s *Server) handleKey(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := admission.ValidateKey(key); err != nil {
		http.Error(w, errorText(err), http.StatusNotFound)
		return
	}
	s.render(w, http.StatusOK, "key.html", s.keyPage(w, r, key))
}

// handleKeysAPI answers the keys page's refresh, or with ?k=KEY a key
// page's.
func (s *Server) handleKeysAPI(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("k")
	if r.URL.Query().Has("k") {
		if err := admission.ValidateKey(key); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			writeJSON(w, keysView{Key: key, Queues: []queueKeys{}, Quotas: []keyQuotaRow{}, Error: errorText(err)})
			return
		}
	}
	writeJSON(w, s.keysView(r.Context(), key))
}

// handleKeyWrite pauses or resumes a key, from a form: action pause or
// resume, key. It sets or clears the Paused of the key's quota and keeps
// its MaxInFlight, as admitq key pause and resume do: a key without a
// quota is paused with a quota that only pauses (no cap); resuming one
// changes nothing. The checks are the quota form's (writable).
func (s *Server) handleKeyWrite(w http.ResponseWriter, r *http.Request) {
	if !s.writable(w, r) {
		return
	}
	key := r.PostFormValue("key")
	if err := admission.ValidateKey(key); err != nil {
		http.Error(w, errorText(err)+"; nothing changed", http.StatusBadRequest)
		return
	}
	action := r.PostFormValue("action")
	if action != "pause" && action != "resume" {
		http.Error(w, "action: want pause or resume", http.StatusBadRequest)
		return
	}
	pause := action == "pause"
	ctx := r.Context()
	fail := func(status int, msg string) {
		p := s.keyPage(w, r, key)
		p.Error = msg
		s.render(w, status, "key.html", p)
	}
	q, err := s.quotas.GetKey(ctx, key)
	fresh := false
	switch {
	case errors.Is(err, admission.ErrNoQuota) && !pause:
		fail(http.StatusConflict, "This key has no quota, so it is not paused; nothing changed.")
		return
	case errors.Is(err, admission.ErrNoQuota):
		q, fresh = admission.Quota{Limit: admission.NoLimit}, true
	case err != nil:
		fail(http.StatusInternalServerError, errorText(err))
		return
	}
	if q.Paused != pause || fresh {
		q.Paused = pause
		if err := s.quotas.SetKey(ctx, key, q); err != nil {
			fail(http.StatusInternalServerError, errorText(err))
			return
		}
		msg := "dashboard: key resumed"
		if pause {
			msg = "dashboard: key paused"
		}
		s.log.Info(msg, "key", key, "quota", keyQuotaText(q), "by", s.actor(r))
		s.forgetDispatch()
	}
	http.Redirect(w, r, keyLink(key)+"?saved="+url.QueryEscape(keyQuotaText(q)), http.StatusSeeOther)
}
