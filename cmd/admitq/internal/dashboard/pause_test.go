package dashboard

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
)

// TestPauseAndResumeFlipOnlyPaused: the tenant page's buttons set and
// clear Paused and nothing else, a quota edit keeps it, and both the
// tenants list and the tenant page say "paused".
func TestPauseAndResumeFlipOnlyPaused(t *testing.T) {
	st := newStack(t)
	own := admission.Quota{Limit: 5, Window: time.Minute, MaxDelay: time.Second, MaxInFlight: 3}
	st.setQuota(t, "acme", own)
	d, hs := st.dashboard(t, Config{})
	csrf := strings.Repeat("5a", 32)
	flip := func(action string) {
		t.Helper()
		resp := post(t, hs.URL, url.Values{"action": {action}, "tenant": {"acme"}}, csrf, nil)
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/tenants/acme?saved=") {
			t.Fatalf("%s: %d to %q, want 303 to acme's page", action, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	quota := func() admission.Quota {
		t.Helper()
		q, err := st.quotas.Get(t.Context(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	paused := own
	paused.Paused = true

	flip("pause")
	if got := quota(); got != paused {
		t.Fatalf("after pause: %+v, want %+v", got, paused)
	}
	flip("pause") // already paused: nothing changes, no error
	if got := quota(); got != paused {
		t.Fatalf("after a second pause: %+v", got)
	}
	p, err := d.tenantsPage(t.Context(), "", 1, false, 0)
	if err != nil || len(p.Rows) != 1 || !p.Rows[0].Paused {
		t.Errorf("tenants list after pause: %+v, %v; want acme's row paused", p.Rows, err)
	}
	page := getBody(t, hs.URL+"/tenants/acme")
	for _, want := range []string{`id="paused"`, `id="resume"`, `name="action" value="resume"`, `name="csrf" value="`} {
		if !strings.Contains(page, want) {
			t.Errorf("acme's page while paused lacks %s", want)
		}
	}

	// An edit through the quota form keeps the pause.
	resp := post(t, hs.URL, url.Values{"action": {"set"}, "tenant": {"acme"}, "limit": {"7"}, "window": {"1m"}, "max-delay": {"1s"}, "mode": {"log"}, "max-in-flight": {"3"}}, csrf, nil)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("quota edit: %d", resp.StatusCode)
	}
	if got := quota(); !got.Paused || got.Limit != 7 {
		t.Fatalf("after an edit of a paused quota: %+v, want limit 7 and still paused", got)
	}

	flip("resume")
	if got := quota(); got.Paused || got.Limit != 7 || got.MaxInFlight != 3 || got.MaxDelay != time.Second {
		t.Fatalf("after resume: %+v, want limit 7, max in flight 3, max delay 1s, not paused", got)
	}
	page = getBody(t, hs.URL+"/tenants/acme")
	if strings.Contains(page, `id="paused"`) || !strings.Contains(page, `id="pause"`) {
		t.Errorf("acme's page after resume: want a Pause button and no paused badge")
	}
	if log := st.log.String(); !strings.Contains(log, `msg="dashboard: tenant paused" tenant=acme`) || !strings.Contains(log, `msg="dashboard: tenant resumed" tenant=acme`) {
		t.Errorf("log lacks the pause and the resume:\n%s", log)
	}
}

// TestPauseOnTheDefaultAndWithoutAQuota follows admitq quota pause: a
// tenant on the default is paused with a copy of it; one with no quota and
// no default cannot be, nor can a tenant without a quota be resumed.
func TestPauseOnTheDefaultAndWithoutAQuota(t *testing.T) {
	st := newStack(t)
	_, hs := st.dashboard(t, Config{})
	csrf := strings.Repeat("6b", 32)
	send := func(action, tenant string) int {
		return post(t, hs.URL, url.Values{"action": {action}, "tenant": {tenant}}, csrf, nil).StatusCode
	}
	if got := send("pause", "lone"); got != http.StatusConflict {
		t.Errorf("pause with no quota and no default: %d, want 409", got)
	}
	if _, err := st.quotas.Get(t.Context(), "lone"); !errors.Is(err, admission.ErrNoQuota) {
		t.Errorf("a refused pause wrote a quota: %v", err)
	}
	if got := send("pause", "(default)x"); got != http.StatusConflict {
		t.Errorf("pause of another tenant without a quota: %d, want 409", got)
	}
	def := admission.Quota{Limit: 3, Window: time.Second}
	if err := st.quotas.SetDefault(t.Context(), def); err != nil {
		t.Fatal(err)
	}
	if got := send("resume", "lone"); got != http.StatusConflict {
		t.Errorf("resume of a tenant on the default: %d, want 409", got)
	}
	if got := send("pause", "lone"); got != http.StatusSeeOther {
		t.Fatalf("pause of a tenant on the default: %d, want 303", got)
	}
	want := def
	want.Paused = true
	if q, err := st.quotas.Get(t.Context(), "lone"); err != nil || q != want {
		t.Errorf("lone after pause: %+v, %v; want a paused copy of the default %+v", q, err, want)
	}
	if q, _ := st.quotas.GetDefault(t.Context()); q.Paused {
		t.Error("pausing a tenant paused the default")
	}
	if got := post(t, hs.URL, url.Values{"action": {"pause"}, "default": {"1"}}, csrf, nil).StatusCode; got != http.StatusBadRequest {
		t.Errorf("pause of the default: %d, want 400", got)
	}
}

// TestPauseNeedsWhatAQuotaEditNeeds: the buttons go through the quota
// form's checks: CSRF, cross-origin, read-only, the token.
func TestPauseNeedsWhatAQuotaEditNeeds(t *testing.T) {
	st := newStack(t)
	st.setQuota(t, "acme", admission.Quota{Limit: 5, Window: time.Minute})
	_, open := st.dashboard(t, Config{})
	_, ro := st.dashboard(t, Config{ReadOnly: true})
	_, tok := st.dashboard(t, Config{Token: "sekrit"})
	csrf := strings.Repeat("7c", 32)
	pause := func() url.Values { return url.Values{"action": {"pause"}, "tenant": {"acme"}} }
	for _, c := range refusedWrites(open.URL, ro.URL, tok.URL, csrf) {
		if got := post(t, c.base, pause(), c.csrf, c.header).StatusCode; got != c.want {
			t.Errorf("%s: %d, want %d", c.desc, got, c.want)
		}
		if q, _ := st.quotas.Get(t.Context(), "acme"); q.Paused {
			t.Fatalf("%s: acme got paused", c.desc)
		}
	}
	if got := post(t, tok.URL, pause(), csrf, http.Header{"Authorization": {"Bearer sekrit"}}).StatusCode; got != http.StatusSeeOther {
		t.Errorf("with the token: %d, want 303", got)
	}
	if q, _ := st.quotas.Get(t.Context(), "acme"); !q.Paused {
		t.Error("with the token, acme is not paused")
	}
	page := getBody(t, ro.URL+"/tenants/acme")
	if strings.Contains(page, `id="pause-form"`) || !strings.Contains(page, `id="paused"`) {
		t.Error("a read-only dashboard shows a pause form, or not the paused badge")
	}
}

// TestATenantWithNoQuotaIsCountedApart: with no default, a tenant with a
// window but no quota is "no quota", not "on the default", and its row
// holds no error.
func TestATenantWithNoQuotaIsCountedApart(t *testing.T) {
	st := newStack(t)
	st.setQuota(t, "acme", admission.Quota{Limit: 5, Window: time.Minute})
	st.setQuota(t, "orphan", admission.Quota{Limit: 5, Window: time.Minute})
	st.send(t, "orphan", 1) // a window in Redis
	if err := st.quotas.Delete(t.Context(), "orphan"); err != nil {
		t.Fatal(err)
	}
	d, _ := st.dashboard(t, Config{})
	p, err := d.tenantsPage(t.Context(), "", 1, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.All != 1 || p.Others != 0 || p.NoQuota != 1 {
		t.Errorf("counts: %d own, %d on the default, %d with no quota; want 1, 0, 1", p.All, p.Others, p.NoQuota)
	}
	for _, r := range p.Rows {
		if r.Tenant == "orphan" && (!r.NoQuota || r.OnDefault || r.Error != "" || r.Quota != "no quota") {
			t.Errorf("orphan's row: %+v, want no quota, not on the default, no error", r)
		}
	}
	if err := st.quotas.SetDefault(t.Context(), admission.Quota{Limit: 1, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	d.forgetList()
	if p, _ = d.tenantsPage(t.Context(), "", 1, false, 0); p.Others != 1 || p.NoQuota != 0 {
		t.Errorf("with a default: %d on the default, %d with no quota; want 1, 0", p.Others, p.NoQuota)
	}
}

// TestNoDecisionSeriesIsSaid: a source that exports task starts but no
// decisions (admitq worker) sets the note's flag; one with decisions, or
// no answer yet, does not.
func TestNoDecisionSeriesIsSaid(t *testing.T) {
	src := &fakeSource{}
	r := newRates([]Source{src}, time.Second, time.Minute)
	if r.view(nil, 0, false, nil).NoDecisions {
		t.Error("before any read: NoDecisions, want false (nothing is known yet)")
	}
	src.set(nil, map[string]float64{"acme": 3}, map[string]float64{"acme": 1})
	r.sample(context.Background())
	if !r.view(nil, 0, false, nil).NoDecisions {
		t.Error("a worker's metrics only: NoDecisions false, want true")
	}
	src.set(map[[2]string]float64{{"acme", "admitted"}: 4}, map[string]float64{"acme": 3}, nil)
	r.sample(context.Background())
	if r.view(nil, 0, false, nil).NoDecisions {
		t.Error("with a producer's decisions: NoDecisions true, want false")
	}
}

func getBody(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", u, resp.StatusCode, b)
	}
	return string(b)
}
