package dashboard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
)

// TestACappedTenantShowsItsDepth: with no worker running, a tenant capped
// at 1 in flight that sends 3 tasks holds 1 permit and parks 2; both pages
// say so, and an uncapped tenant shows no depth.
func TestACappedTenantShowsItsDepth(t *testing.T) {
	st := newStack(t)
	st.setQuota(t, "calm", admission.Quota{Limit: 5, Window: time.Minute})
	d, hs := st.dashboard(t, Config{})
	if p, err := d.tenantsPage(t.Context(), "", 1, false, 0); err != nil || p.HasDepth {
		t.Fatalf("no tenant capped: HasDepth = %v, %v; want false", p.HasDepth, err)
	}
	st.setQuota(t, "noisy", admission.Quota{Limit: 100, Window: time.Minute, MaxInFlight: 1, MaxParked: 10})
	st.serve(t, testQueue)
	st.send(t, "noisy", 3)
	d.forgetList()

	p, err := d.tenantsPage(t.Context(), "", 1, false, 0)
	if err != nil || !p.HasDepth || len(p.Rows) != 2 {
		t.Fatalf("got %+v, %v; want two rows and the depth columns", p, err)
	}
	calm, noisy := p.Rows[0], p.Rows[1]
	if calm.Depth != nil {
		t.Errorf("calm, uncapped, has depth %+v", *calm.Depth)
	}
	if noisy.Depth == nil {
		t.Fatalf("noisy has no depth: %+v", noisy)
	}
	if got := *noisy.Depth; got.InFlight != 1 || got.Cap != 1 || got.Parked != 2 || got.MaxParked != 10 || got.OldestAge < 1 {
		t.Errorf("noisy's depth = %+v; want 1 in flight of 1, 2 parked of 10, an oldest age", got)
	}

	resp, err := http.Get(hs.URL + "/api/tenant?t=noisy")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v tenantView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v.Depth == nil || v.Depth.InFlight != 1 || v.Depth.Parked != 2 {
		t.Errorf("tenant page's depth = %+v; want 1 in flight, 2 parked", v.Depth)
	}
}

// postForm sends a quota form and returns the status and body.
func postForm(t *testing.T, base string, form url.Values) (int, string) {
	t.Helper()
	csrf := strings.Repeat("ab", 32)
	form.Set(csrfField, csrf)
	req, _ := http.NewRequest(http.MethodPost, base+"/quota", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: csrfCookie, Value: csrf})
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestTheFormSetsTheCapWithTheCommandLinesChecks: max in flight and max
// parked are saved; each mistake admitq quota set refuses comes back next
// to its field with the command line's message, and nothing is written.
func TestTheFormSetsTheCapWithTheCommandLinesChecks(t *testing.T) {
	st := newStack(t)
	_, hs := st.dashboard(t, Config{})
	set := func(inFlight, parked, mode string) url.Values {
		return url.Values{"action": {"set"}, "tenant": {"acme"}, "limit": {"5"}, "window": {"1s"}, "mode": {mode},
			"max-in-flight": {inFlight}, "max-parked": {parked}}
	}
	for _, c := range []struct {
		desc, inFlight, parked, mode, field, message string
	}{
		{"negative cap", "-1", "", "log", "max-in-flight", "-1: want 0 (no cap) or more"},
		{"negative parked bound", "2", "-5", "log", "max-parked", "-5: want 0 (the default) or more"},
		{"not a number", "four", "", "log", "max-in-flight", `&#34;four&#34;: want a whole number`},
	} {
		code, body := postForm(t, hs.URL, set(c.inFlight, c.parked, c.mode))
		want := `data-field="` + c.field + `">` + c.message + `</span>`
		if code != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("%s: status %d, want 400 and %q in:\n%s", c.desc, code, want, body)
		}
		if all, _ := st.quotas.List(t.Context()); len(all.Tenants) != 0 {
			t.Fatalf("%s: quotas written: %v", c.desc, all.Tenants)
		}
	}

	// A cap in counter mode is taken: the dispatcher counts the tenant's
	// tasks in flight itself, whatever the mode.
	if code, body := postForm(t, hs.URL, set("2", "", "counter")); code != http.StatusSeeOther {
		t.Fatalf("a cap in counter mode: status %d, want 303:\n%s", code, body)
	}
	if q, err := st.quotas.Get(t.Context(), "acme"); err != nil || q != (admission.Quota{Limit: 5, Window: time.Second, Mode: admission.Counter, MaxInFlight: 2}) {
		t.Errorf("a cap in counter mode: acme's quota = %v, %v", q, err)
	}

	if code, _ := postForm(t, hs.URL, set("4", "50", "log")); code != http.StatusSeeOther {
		t.Fatalf("a good cap: status %d, want 303", code)
	}
	want := admission.Quota{Limit: 5, Window: time.Second, MaxInFlight: 4, MaxParked: 50}
	if q, err := st.quotas.Get(t.Context(), "acme"); err != nil || q != want {
		t.Errorf("acme's quota = %v, %v; want %v", q, err, want)
	}
	resp, err := http.Get(hs.URL + "/tenants/acme")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `name="max-in-flight" inputmode="numeric" value="4"`) || !strings.Contains(string(body), `name="max-parked" inputmode="numeric" value="50"`) {
		t.Errorf("the tenant's form does not show its cap:\n%s", body)
	}
}

// TestTheTenantsPageWarnsOfRedisAndQueues: an evicting maxmemory-policy,
// and parked tasks in a queue no worker with a gate serves, are banners.
func TestTheTenantsPageWarnsOfRedisAndQueues(t *testing.T) {
	st := newStack(t)
	st.setQuota(t, "noisy", admission.Quota{Limit: 100, Window: time.Minute, MaxInFlight: 1, MaxParked: 10})
	hold, err := dispatch.New(st.rdb, st.gate, nil).Serve(dispatch.Worker{Queues: []string{testQueue}, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	st.send(t, "noisy", 3)
	hold.Close()
	if err := st.rdb.ConfigSet(t.Context(), "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	d, _ := st.dashboard(t, Config{})
	p, err := d.tenantsPage(t.Context(), "", 1, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(p.Warnings, "\n")
	for _, want := range []string{"maxmemory-policy volatile-lru", "2 parked tasks and no worker with a Gate"} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings %q lack %q", p.Warnings, want)
		}
	}
}

// TestAHeldTenantSaysSo: a tenant the dispatcher holds back in some queue
// (its rate, or worker.Throttled) is marked held on the tenants page and
// its own.
func TestAHeldTenantSaysSo(t *testing.T) {
	st := newStack(t)
	st.setQuota(t, "calm", admission.Quota{Limit: 100, Window: time.Minute})
	st.setQuota(t, "noisy", admission.Quota{Limit: 100, Window: time.Minute})
	d, hs := st.dashboard(t, Config{})
	withStats(d,
		dispatch.QueueStats{Queue: "a", Tenants: []dispatch.TenantStats{{Tenant: "calm", Waiting: 1}, {Tenant: "noisy", Waiting: 3}}},
		dispatch.QueueStats{Queue: "b", Tenants: []dispatch.TenantStats{{Tenant: "noisy", Waiting: 2, Held: true}}},
	)
	p, err := d.tenantsPage(t.Context(), "", 1, false, 0)
	if err != nil || len(p.Rows) != 2 || p.Rows[0].Depth == nil || p.Rows[1].Depth == nil {
		t.Fatalf("rows %+v, %v; want calm's and noisy's, each with its depth", p.Rows, err)
	}
	if calm, noisy := *p.Rows[0].Depth, *p.Rows[1].Depth; calm.Held || !noisy.Held || noisy.Parked != 5 {
		t.Errorf("calm held %v; noisy held %v with %d parked; want calm not held, noisy held (in queue b) with 5", calm.Held, noisy.Held, noisy.Parked)
	}
	resp, err := http.Get(hs.URL + "/api/tenant?t=noisy")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v tenantView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v.Depth == nil || !v.Depth.Held {
		t.Errorf("noisy's page: depth %+v, want held", v.Depth)
	}
}
