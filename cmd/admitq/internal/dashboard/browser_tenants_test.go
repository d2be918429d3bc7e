package dashboard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/admitq/admitq/admission"
)

// TestTheTenantsTableFitsAt1400px: at 1,400 px wide, with the widest
// cells the table draws (a long name, every quota field, the depth
// columns, badges), every column, the last one included, is inside the
// viewport and the page does not scroll sideways.
func TestTheTenantsTableFitsAt1400px(t *testing.T) {
	st := newStack(t)
	long := strings.Repeat("tenant-with-a-long-name-", 3)
	full := admission.Quota{Limit: 100, Window: time.Minute, MaxDelay: 10 * time.Minute, MaxInFlight: 4, MaxParked: 50000, Weight: 3, Paused: true}
	st.setQuota(t, long, full)
	for i := range 6 {
		st.setQuota(t, fmt.Sprintf("tenant-%d", i), admission.Quota{Limit: 5, Window: time.Minute, MaxDelay: 10 * time.Minute, MaxInFlight: 2})
	}
	// A tenant with a window in Redis and no quota, and no default.
	st.setQuota(t, "orphan", admission.Quota{Limit: 5, Window: time.Minute})
	st.send(t, "orphan", 1)
	if err := st.quotas.Delete(t.Context(), "orphan"); err != nil {
		t.Fatal(err)
	}
	st.startWorker(t)
	_, hs := st.dashboard(t, Config{})
	ctx := browser(t)
	waitRates(t, hs.URL)
	st.send(t, "tenant-0", 8) // deferred ahead: "in 59s" in its row

	within(t, ctx, 20*time.Second, "loading the tenants page at 1400 px",
		chromedp.EmulateViewport(1400, 900),
		chromedp.Navigate(hs.URL+"/"),
	)
	waitJS(t, ctx, "tenant-0's window", cellJS("tenant-0", "in_window")+` === "5 / 5"`)
	waitJS(t, ctx, "the orphan's row", `!!document.querySelector('tr[data-tenant="orphan"]')`)
	// The producer's decisions are in the metrics: no note about them.
	waitJS(t, ctx, "the note hidden", `document.getElementById("no-decisions").hidden`)
	if got := evalJS[int](t, ctx, `window.innerWidth`); got != 1400 {
		t.Fatalf("viewport %d px wide, want 1400", got)
	}
	heads := evalJS[[]string](t, ctx, `[...document.querySelectorAll("#tenants thead th")].filter(th => !th.hidden).map(th => th.textContent.trim().split(/\s+/).slice(0, 2).join(" ") + "|" + Math.round(th.getBoundingClientRect().right))`)
	width := evalJS[int](t, ctx, `document.documentElement.clientWidth`)
	if len(heads) < 11 {
		t.Fatalf("columns %q, want all 11 (the depth columns shown)", heads)
	}
	for _, h := range heads {
		name, right, _ := strings.Cut(h, "|")
		var r int
		fmt.Sscan(right, &r)
		if r > width {
			t.Errorf("column %q ends at %d px, past the viewport's %d", name, r, width)
		}
	}
	if sw := evalJS[int](t, ctx, `document.documentElement.scrollWidth`); sw > width {
		t.Errorf("the page is %d px wide in a %d px viewport: it scrolls sideways", sw, width)
	}
	// The started column's charts are inside too, not only its heading.
	if r := evalJS[int](t, ctx, `Math.round(Math.max(...[...document.querySelectorAll('#rows td[data-k="started"]')].map(td => td.getBoundingClientRect().right)))`); r > width {
		t.Errorf("the Tasks started/s cells end at %d px, past %d", r, width)
	}
	if got := evalJS[string](t, ctx, `document.getElementById("summary").textContent`); !strings.HasPrefix(got, "7 tenants with a quota of their own, 1 with no quota") {
		t.Errorf("summary %q, want 7 with a quota of their own, 1 with no quota", got)
	}
	if got := evalJS[string](t, ctx, cellJS("orphan", "tenant")+` + " | " + `+cellJS("orphan", "next_free")); got != "orphanno quota | " {
		t.Errorf("the orphan's row %q, want a no-quota badge and no error", got)
	}
	if got := evalJS[string](t, ctx, `(document.querySelector('tr[data-tenant=`+fmt.Sprintf("%q", long)+`] .badge.paused') || {}).textContent`); got != "paused" {
		t.Errorf("the paused tenant's badge %q, want paused", got)
	}
	shot(t, ctx, "tenants-1400.png")
}

// TestPauseAndResumeInABrowser clicks the tenant page's Pause and Resume
// buttons and reads the quota back, and the tenants list's badge.
func TestPauseAndResumeInABrowser(t *testing.T) {
	st := newStack(t)
	own := admission.Quota{Limit: 5, Window: time.Minute, MaxInFlight: 2}
	st.setQuota(t, "acme", own)
	_, hs := st.dashboard(t, Config{})
	ctx := browser(t)
	waitRates(t, hs.URL)

	// Nothing was enqueued, so the metrics hold no decision series: the
	// page says why its decision chart is empty.
	within(t, ctx, 20*time.Second, "loading acme's page", chromedp.Navigate(hs.URL+"/tenants/acme"))
	waitJS(t, ctx, "the note that no source exports decisions", `!document.getElementById("no-decisions").hidden`)
	shot(t, ctx, "tenant-paused.png")
	within(t, ctx, 20*time.Second, "pausing acme",
		chromedp.WaitVisible(`#pause`),
		chromedp.Click(`#pause`),
	)
	waitJS(t, ctx, "the paused badge and a Resume button", `!!document.getElementById("paused") && !!document.getElementById("resume")`)
	want := own
	want.Paused = true
	if q, err := st.quotas.Get(t.Context(), "acme"); err != nil || q != want {
		t.Errorf("after Pause: %+v, %v; want %+v", q, err, want)
	}
	within(t, ctx, 20*time.Second, "loading the tenants page", chromedp.Navigate(hs.URL+"/"))
	waitJS(t, ctx, "acme's paused badge", `(document.querySelector('tr[data-tenant="acme"] .badge.paused') || {}).textContent === "paused"`)

	within(t, ctx, 20*time.Second, "resuming acme",
		chromedp.Navigate(hs.URL+"/tenants/acme"),
		chromedp.WaitVisible(`#resume`),
		chromedp.Click(`#resume`),
	)
	waitJS(t, ctx, "a Pause button and no badge", `!document.getElementById("paused") && !!document.getElementById("pause")`)
	if q, err := st.quotas.Get(t.Context(), "acme"); err != nil || q != own {
		t.Errorf("after Resume: %+v, %v; want %+v", q, err, own)
	}
	within(t, ctx, 20*time.Second, "loading the tenants page", chromedp.Navigate(hs.URL+"/"))
	waitJS(t, ctx, "acme's row", cellJS("acme", "in_window")+` === "0 / 5"`)
	if evalJS[bool](t, ctx, `!!document.querySelector('tr[data-tenant="acme"] .badge.paused')`) {
		t.Error("the tenants list still shows acme paused")
	}
}
