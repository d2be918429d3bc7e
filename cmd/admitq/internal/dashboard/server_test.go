package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/admitq/admitq/admission"
)

// post sends a quota form to the dashboard with the CSRF cookie and field
// given ("" for none) and extra headers. A field of "!" sends one that
// differs from the cookie.
func post(t *testing.T, base string, form url.Values, csrf string, header http.Header) *http.Response {
	t.Helper()
	return postTo(t, base, "/quota", form, csrf, header)
}

// postTo is post to another form's path.
func postTo(t *testing.T, base, path string, form url.Values, csrf string, header http.Header) *http.Response {
	t.Helper()
	if csrf != "" {
		form.Set(csrfField, csrf)
	}
	if header.Get("X-Field") == "!" {
		form.Set(csrfField, strings.Repeat("0", 64))
		header = header.Clone()
		header.Del("X-Field")
	}
	req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if csrf != "" {
		req.AddCookie(&http.Cookie{Name: csrfCookie, Value: csrf})
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v[0]
			continue
		}
		req.Header[k] = v
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// refusedWrite is a way a write must be refused, whatever its action.
type refusedWrite struct {
	desc, base, csrf string
	header           http.Header
	want             int
}

// refusedWrites are the ways a write must be refused by the dashboards at
// open (no token), ro (read-only) and tok (token "sekrit"), with csrf as
// the CSRF token where one is sent.
func refusedWrites(open, ro, tok, csrf string) []refusedWrite {
	return []refusedWrite{
		{"no CSRF token", open, "", nil, http.StatusForbidden},
		{"a CSRF field that is not its cookie", open, csrf, http.Header{"X-Field": {"!"}}, http.StatusForbidden},
		{"a cross-site request, CSRF token and all", open, csrf, http.Header{"Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden},
		{"a read-only dashboard", ro, csrf, nil, http.StatusForbidden},
		{"a dashboard with a token, and no token sent", tok, csrf, nil, http.StatusUnauthorized},
		{"a dashboard with a token, and a wrong one sent", tok, csrf, http.Header{"Authorization": {"Bearer sekriT"}}, http.StatusUnauthorized},
		{"a DNS-rebound host name on a dashboard without a token", open, csrf, http.Header{"Host": {"evil.example"}}, http.StatusForbidden},
	}
}

func TestWritesAreRefusedUnlessEveryCheckPasses(t *testing.T) {
	st := newStack(t)
	st.setQuota(t, "acme", admission.Quota{Limit: 5, Window: time.Minute})
	_, open := st.dashboard(t, Config{})
	_, ro := st.dashboard(t, Config{ReadOnly: true})
	_, tok := st.dashboard(t, Config{Token: "sekrit"})
	csrf := strings.Repeat("ab", 32)
	set := func() url.Values {
		return url.Values{"action": {"set"}, "tenant": {"acme"}, "limit": {"1"}, "window": {"1s"}, "mode": {"log"}}
	}
	for _, c := range refusedWrites(open.URL, ro.URL, tok.URL, csrf) {
		req := post(t, c.base, set(), c.csrf, c.header)
		if req.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d", c.desc, req.StatusCode, c.want)
		}
		if q, _ := st.quotas.Get(t.Context(), "acme"); q.Limit != 5 {
			t.Fatalf("%s: the quota changed to %v", c.desc, q)
		}
	}
	// And each way in that should work does.
	if resp := post(t, tok.URL, set(), csrf, http.Header{"Authorization": {"Bearer sekrit"}}); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("with the token: status %d, want 303", resp.StatusCode)
	}
	if resp := post(t, open.URL, url.Values{"action": {"delete"}, "tenant": {"acme"}}, csrf, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("delete without a token on loopback: status %d, want 303", resp.StatusCode)
	}
	if _, err := st.quotas.Get(t.Context(), "acme"); !errors.Is(err, admission.ErrNoQuota) {
		t.Errorf("after delete: %v, want ErrNoQuota", err)
	}
	if log := st.log.String(); !strings.Contains(log, `msg="dashboard: quota deleted" tenant=acme by="loopback`) || strings.Contains(log, "sekrit") {
		t.Errorf("log:\n%s", log)
	}
}

func TestReadsNeedTheTokenWhenThereIsOne(t *testing.T) {
	st := newStack(t)
	_, hs := st.dashboard(t, Config{Token: "sekrit"})
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for path, want := range map[string]int{"/": http.StatusSeeOther, "/api/tenants": http.StatusUnauthorized, "/keys": http.StatusSeeOther, "/keys/api:stripe": http.StatusSeeOther, "/api/keys": http.StatusUnauthorized, "/asynq/api/queues": http.StatusUnauthorized, "/login": http.StatusOK, "/static/app.js": http.StatusOK} {
		resp, err := c.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without the token: %d, want %d", path, resp.StatusCode, want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/api/tenants", nil)
	req.Header.Set("Authorization", "Bearer sekrit")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /api/tenants with the token: %d", resp.StatusCode)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	st := newStack(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	d, err := New(Config{Redis: st.rdb, Asynq: asynq.RedisClientOpt{Addr: st.srv.Addr()}, Sources: []Source{Scrape(st.scrape.URL, nil)}, Every: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(d)
	resp, err := http.Get(hs.URL + "/api/tenants")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	time.Sleep(50 * time.Millisecond)
	hs.Close()
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	http.DefaultClient.CloseIdleConnections()
}

// fakeSource serves counters the test sets.
type fakeSource struct{ fams []*dto.MetricFamily }

func (f *fakeSource) Name() string { return "fake" }
func (f *fakeSource) Gather(context.Context) ([]*dto.MetricFamily, error) {
	return f.fams, nil
}

func (f *fakeSource) set(decisions map[[2]string]float64, started, busy map[string]float64) {
	counter := func(name string, labels [][2]string, v float64) *dto.Metric {
		m := &dto.Metric{Counter: &dto.Counter{Value: proto.Float64(v)}}
		for _, l := range labels {
			m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(l[0]), Value: proto.String(l[1])})
		}
		return m
	}
	dec := &dto.MetricFamily{Name: proto.String("admitq_gate_decisions_total")}
	for k, v := range decisions {
		dec.Metric = append(dec.Metric, counter("", [][2]string{{"tenant", k[0]}, {"outcome", k[1]}}, v))
	}
	sf := &dto.MetricFamily{Name: proto.String("admitq_tasks_started_total")}
	for t, v := range started {
		sf.Metric = append(sf.Metric, counter("", [][2]string{{"tenant", t}}, v))
	}
	bf := &dto.MetricFamily{Name: proto.String("admitq_task_seconds_total")}
	for t, v := range busy {
		bf.Metric = append(bf.Metric, counter("", [][2]string{{"tenant", t}}, v))
	}
	f.fams = []*dto.MetricFamily{dec, sf, bf}
}

func TestRatesAreIncreasesPerSecondAndFlagsFollowTheirRules(t *testing.T) {
	src := &fakeSource{}
	r := newRates([]Source{src}, time.Second, time.Minute)
	now := time.UnixMilli(1_780_000_000_000)
	r.now = func() time.Time { return now }
	tick := func(dec map[[2]string]float64, started, busy map[string]float64) {
		src.set(dec, started, busy)
		r.sample(context.Background())
		now = now.Add(time.Second)
	}
	// Baseline, then 6 seconds: "noisy" is deferred every second and takes
	// 3 of every 4 worker seconds; "quiet" is admitted only.
	var a, d, s, b float64
	tick(map[[2]string]float64{{"noisy", "admitted"}: 0, {"noisy", "deferred"}: 0}, nil, nil)
	for i := range 6 {
		a, d, s, b = a+2, d+5, s+2, b+3
		tick(map[[2]string]float64{{"noisy", "admitted"}: a, {"noisy", "deferred"}: d, {"quiet", "admitted"}: float64(i + 1)},
			map[string]float64{"noisy": s, "quiet": float64(i + 1)}, map[string]float64{"noisy": b, "quiet": float64(i + 1)})
	}
	// The producer restarts: its counters start again from zero.
	tick(map[[2]string]float64{{"noisy", "admitted"}: 1, {"noisy", "deferred"}: 0, {"quiet", "admitted"}: 1},
		map[string]float64{"noisy": 0, "quiet": 0}, map[string]float64{"noisy": 0, "quiet": 0})

	v := r.view([]string{"noisy", "quiet", "idle"}, 0, false, nil)
	if got, want := v.Series["noisy"].Admitted, []float64{0, 2, 2, 2, 2, 2, 2, 1}; !cmp.Equal(got, want) {
		t.Errorf("noisy admitted/s (-want,+got):\n%s", cmp.Diff(want, got))
	}
	if got, want := v.Series["noisy"].Deferred, []float64{0, 5, 5, 5, 5, 5, 5, 0}; !cmp.Equal(got, want) {
		t.Errorf("noisy deferred/s (-want,+got):\n%s", cmp.Diff(want, got))
	}
	if got := v.Series["idle"].Started; len(got) != len(v.Times) {
		t.Errorf("a tenant never seen gets %d zero points, want %d", len(got), len(v.Times))
	}
	if f := v.Flags["noisy"]; !f.AtLimit || !f.Hog || f.BusyPart != 0.75 {
		t.Errorf("noisy's flags: %+v, want at limit (6 of 7 intervals deferred) and 75%% of worker time", f)
	}
	if f := v.Flags["quiet"]; f.AtLimit || f.Hog {
		t.Errorf("quiet's flags: %+v, want none", f)
	}
	if got := r.flagged(); !cmp.Equal(got, map[string]bool{"noisy": true}) {
		t.Errorf("flagged: %v", got)
	}
	// since: only newer points.
	if part := r.view([]string{"noisy"}, v.Times[len(v.Times)-2], false, nil); len(part.Times) != 1 || len(part.Series["noisy"].Admitted) != 1 {
		t.Errorf("view since the last but one point: %d times, want 1", len(part.Times))
	}
	// The default's row sums the tenants without a quota of their own.
	if got := r.view(nil, 0, true, map[string]bool{"noisy": true}).Series[defaultKey].Admitted; !cmp.Equal(got, []float64{0, 1, 1, 1, 1, 1, 1, 1}) {
		t.Errorf("default row admitted/s: %v", got)
	}
}

func TestAHogNeedsAnotherTenantToStarve(t *testing.T) {
	src := &fakeSource{}
	r := newRates([]Source{src}, time.Second, time.Minute)
	src.set(nil, nil, map[string]float64{"alone": 0})
	r.sample(context.Background())
	src.set(nil, nil, map[string]float64{"alone": 10})
	r.sample(context.Background())
	if f := r.view([]string{"alone"}, 0, false, nil).Flags["alone"]; f.Hog || f.BusyPart != 1 {
		t.Errorf("the only busy tenant: %+v, want 100%% of worker time but no flag", f)
	}
}

func TestAPageShowsTheDefaultRowOnlyWithADefault(t *testing.T) {
	st := newStack(t)
	st.setQuota(t, "acme", admission.Quota{Limit: 5, Window: time.Minute})
	d, _ := st.dashboard(t, Config{})
	p, err := d.tenantsPage(t.Context(), "", 1, false, 0)
	if err != nil || p.Default != nil || len(p.Rows) != 1 {
		t.Fatalf("got %+v, %v", p, err)
	}
	if err := st.quotas.SetDefault(t.Context(), admission.Quota{Limit: 1, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	d.forgetList()
	if p, _ = d.tenantsPage(t.Context(), "", 1, false, 0); p.Default == nil || p.Default.Quota != "1/1s" {
		t.Errorf("default row: %+v", p.Default)
	}
}

func TestABadTenantNameComesBackNextToItsField(t *testing.T) {
	st := newStack(t)
	_, hs := st.dashboard(t, Config{})
	csrf := strings.Repeat("cd", 32)
	form := url.Values{"action": {"set"}, "new": {"1"}, "tenant": {"bad\x01name"}, "limit": {"5"}, "window": {"1s"}, "mode": {"log"}, csrfField: {csrf}}
	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/quota", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: csrfCookie, Value: csrf})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := new(strings.Builder)
	_, _ = io.Copy(body, resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body.String(), `<span class="err" data-field="tenant">`) {
		t.Errorf("status %d, body:\n%s", resp.StatusCode, body)
	}
	if all, _ := st.quotas.List(t.Context()); len(all.Tenants) != 0 {
		t.Errorf("quotas written: %v", all.Tenants)
	}
}

func TestTheTenantListIsReadAgainInTheBackground(t *testing.T) {
	st := newStack(t)
	st.setQuota(t, "acme", admission.Quota{Limit: 5, Window: time.Minute})
	d, _ := st.dashboard(t, Config{})
	d.listTTL = 20 * time.Millisecond
	if p, err := d.tenantsPage(t.Context(), "", 1, false, 0); err != nil || p.All != 1 {
		t.Fatalf("first page: %d tenants, %v", p.All, err)
	}
	// A quota set elsewhere (admitq quota set) shows up once the list is
	// older than listTTL, without any page waiting for the read.
	st.setQuota(t, "globex", admission.Quota{Limit: 5, Window: time.Minute})
	deadline := time.Now().Add(5 * time.Second)
	for {
		p, err := d.tenantsPage(t.Context(), "", 1, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		if p.All == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d tenants after 5s", p.All)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestAPageSaysWhenRedisIsDown(t *testing.T) {
	st := newStack(t)
	st.setQuota(t, "acme", admission.Quota{Limit: 5, Window: time.Minute})
	d, _ := st.dashboard(t, Config{Timeout: 300 * time.Millisecond})
	if _, err := d.tenantsPage(t.Context(), "", 1, false, 0); err != nil {
		t.Fatal(err)
	}
	st.srv.Kill()
	start := time.Now()
	p, err := d.tenantsPage(t.Context(), "", 1, false, 0)
	if err != nil || len(p.Rows) != 1 || p.Rows[0].Error == "" {
		t.Fatalf("with Redis down: %+v, %v; want acme's row with its error", p.Rows, err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a page with Redis down took %v", took)
	}
	d.forgetList()
	if _, err := d.tenantsPage(t.Context(), "", 1, false, 0); err == nil {
		t.Error("no error when the quota list cannot be read")
	}
}

func TestATenantWithASlashHasItsOwnPage(t *testing.T) {
	st := newStack(t)
	const name = "team/ünïcode name"
	st.setQuota(t, name, admission.Quota{Limit: 5, Window: time.Minute})
	_, hs := st.dashboard(t, Config{})
	resp, err := http.Get(hs.URL + "/tenants/" + url.PathEscape(name))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := new(strings.Builder)
	_, _ = io.Copy(body, resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body.String(), "Its own quota: <b>5/1m0s</b>") {
		t.Errorf("status %d, body:\n%s", resp.StatusCode, body)
	}
}

func TestTheDefaultIsSetAndDeletedThroughItsForm(t *testing.T) {
	st := newStack(t)
	_, hs := st.dashboard(t, Config{})
	csrf := strings.Repeat("ef", 32)
	resp := post(t, hs.URL, url.Values{"action": {"set"}, "default": {"1"}, "limit": {"3"}, "window": {"2s"}, "max-delay": {"1s"}, "mode": {"log"}}, csrf, nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/default?saved=") {
		t.Fatalf("set default: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if q, err := st.quotas.GetDefault(t.Context()); err != nil || q != (admission.Quota{Limit: 3, Window: 2 * time.Second, MaxDelay: time.Second}) {
		t.Errorf("default after set: %v, %v", q, err)
	}
	if resp := post(t, hs.URL, url.Values{"action": {"set"}, "default": {"1"}, "limit": {"-1"}, "window": {"2s"}, "mode": {"log"}}, csrf, nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a bad default: %d, want 400", resp.StatusCode)
	}
	if resp := post(t, hs.URL, url.Values{"action": {"delete"}, "default": {"1"}}, csrf, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("delete default: %d", resp.StatusCode)
	}
	if _, err := st.quotas.GetDefault(t.Context()); !errors.Is(err, admission.ErrNoQuota) {
		t.Errorf("default after delete: %v, want ErrNoQuota", err)
	}
	if log := st.log.String(); !strings.Contains(log, `msg="dashboard: quota set" default=true quota="3/2s, max delay 1s"`) || !strings.Contains(log, `msg="dashboard: quota deleted" default=true`) {
		t.Errorf("log:\n%s", log)
	}
}

// A tenant named "(default)", the default row's label, is a tenant like any
// other: its own row beside the default's, its own rates, page and quota
// edits, while the default's row and page stay the default's.
func TestATenantNamedLikeTheDefaultRowIsItsOwn(t *testing.T) {
	st := newStack(t)
	const name = DefaultRow
	own := admission.Quota{Limit: 5, Window: time.Minute}
	def := admission.Quota{Limit: 3, Window: time.Second}
	st.setQuota(t, name, own)
	if err := st.quotas.SetDefault(t.Context(), def); err != nil {
		t.Fatal(err)
	}
	d, hs := st.dashboard(t, Config{})
	waitRates(t, hs.URL)
	st.send(t, name, 2)       // on its own quota
	st.send(t, "stranger", 1) // on the default

	// The tenants page: both rows, each with its own rates. The rates are
	// sampled every 300 ms: wait until both sums are in.
	var p tenantsPage
	// What a series adds up to: each point's rate times the time since the
	// point before, about Every.
	sum := func(times []int64, s []float64) (n float64) {
		for i, x := range s {
			dt := d.cfg.Every.Seconds()
			if i > 0 {
				dt = float64(times[i]-times[i-1]) / 1000
			}
			n += x * dt
		}
		return math.Round(n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if p, err = d.tenantsPage(t.Context(), "", 1, false, 0); err != nil {
			t.Fatal(err)
		}
		// stranger is listed once the metrics or a scan of the windows
		// have seen it.
		if sum(p.Rates.Times, p.Rates.Series[name].Admitted) >= 2 && sum(p.Rates.Times, p.Rates.Series[defaultKey].Admitted) >= 1 && len(p.Rows) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(p.Rows) != 2 || p.Rows[0].Tenant != name || p.Rows[0].Key != name || p.Rows[0].Quota != own.String() || p.Rows[0].OnDefault ||
		p.Rows[0].InWindow != 2 || p.Rows[0].Link != "/tenants/"+url.PathEscape(name) || p.Rows[0].Shown != `"(default)"` {
		t.Errorf("rows: %+v, want %q's own, on %v with 2 in its window, shown quoted", p.Rows, name, own)
	}
	// The tenant on the default is listed too, as such.
	if len(p.Rows) == 2 && (p.Rows[1].Tenant != "stranger" || !p.Rows[1].OnDefault || p.Rows[1].Quota != def.String()+" (default)" || p.Rows[1].InWindow != 1) {
		t.Errorf("second row: %+v, want stranger on the default with 1 in its window", p.Rows[1])
	}
	if p.Default == nil || p.Default.Key == name || p.Default.Quota != def.String() || p.Default.Link != "/default" {
		t.Errorf("default row: %+v, want the default's, keyed apart from the tenant", p.Default)
	}
	if got, want := [2]float64{sum(p.Rates.Times, p.Rates.Series[name].Admitted), sum(p.Rates.Times, p.Rates.Series[defaultKey].Admitted)}, [2]float64{2, 1}; got != want {
		t.Errorf("admitted (tenant %q, default) = %v, want %v: the rates are mixed up", name, got, want)
	}

	// Its page's refresh is its own; the default's has a parameter of its
	// own.
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	var v tenantView
	if err := json.Unmarshal([]byte(get("/api/tenant?t="+url.QueryEscape(name))), &v); err != nil {
		t.Fatal(err)
	}
	if v.Tenant != name || v.Quota != own.String() || v.InWindow != 2 || len(v.Entries) != 2 || v.Error != "" {
		t.Errorf("/api/tenant?t=%s: %+v, want its own usage: 2 entries on %v", name, v, own)
	}
	if _, ok := v.Rates.Series[name]; !ok {
		t.Errorf("/api/tenant?t=%s: no rates of its own: %v", name, v.Rates.Series)
	}
	v = tenantView{}
	if err := json.Unmarshal([]byte(get("/api/tenant?default=1")), &v); err != nil {
		t.Fatal(err)
	}
	if v.Tenant != defaultKey || v.Quota != "" || v.Error != "" || sum(v.Rates.Times, v.Rates.Series[defaultKey].Admitted) != 1 {
		t.Errorf("/api/tenant?default=1: %+v, want the default's rates, 1 admitted", v)
	}
	if page := get("/tenants/" + url.PathEscape(name)); !strings.Contains(page, `data-tenant="(default)"`) || strings.Contains(page, "data-default") ||
		!strings.Contains(page, "Its own quota: <b>"+own.String()+"</b>") {
		t.Errorf("%q's page is not its own:\n%s", name, page)
	}
	if page := get("/default"); !strings.Contains(page, `data-default="1"`) || strings.Contains(page, "data-tenant") {
		t.Errorf("the default's page:\n%s", page)
	}

	// Its quota is set and deleted through its form, and the default stays.
	csrf := strings.Repeat("0a", 32)
	resp := post(t, hs.URL, url.Values{"action": {"set"}, "tenant": {name}, "limit": {"7"}, "window": {"1m"}, "mode": {"log"}}, csrf, nil)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/tenants/"+url.PathEscape(name)+"?saved=") {
		t.Errorf("set %q's quota: %d %s", name, resp.StatusCode, loc)
	}
	if q, err := st.quotas.Get(t.Context(), name); err != nil || q.Limit != 7 {
		t.Errorf("%q's quota after set: %v, %v", name, q, err)
	}
	if resp := post(t, hs.URL, url.Values{"action": {"delete"}, "tenant": {name}}, csrf, nil); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("delete %q's quota: %d", name, resp.StatusCode)
	}
	if _, err := st.quotas.Get(t.Context(), name); !errors.Is(err, admission.ErrNoQuota) {
		t.Errorf("%q's quota after delete: %v, want ErrNoQuota", name, err)
	}
	if q, err := st.quotas.GetDefault(t.Context()); err != nil || q != def {
		t.Errorf("the default after %q's edits: %v, %v; want %v", name, q, err, def)
	}
	if log := st.log.String(); !strings.Contains(log, `msg="dashboard: quota set" tenant=(default) quota=7/1m0s`) || !strings.Contains(log, `msg="dashboard: quota deleted" tenant=(default)`) || strings.Contains(log, "default=true") {
		t.Errorf("log:\n%s", log)
	}
}

// TestASubSecondMaxDelayIsWarnedAbout: the form, like admitq quota set,
// says that a MaxDelay under a second rarely defers.
func TestASubSecondMaxDelayIsWarnedAbout(t *testing.T) {
	st := newStack(t)
	st.setQuota(t, "acme", admission.Quota{Limit: 5, Window: time.Second, MaxDelay: 500 * time.Millisecond})
	st.setQuota(t, "fine", admission.Quota{Limit: 5, Window: time.Second, MaxDelay: 2 * time.Second})
	_, hs := st.dashboard(t, Config{})
	for tenant, want := range map[string]bool{"acme": true, "fine": false} {
		resp, err := http.Get(hs.URL + "/tenants/" + tenant)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := strings.Contains(string(b), `id="warning">Max delay 500ms is under a second`)
		if got != want {
			t.Errorf("%s's page warns: %v, want %v", tenant, got, want)
		}
	}
}
