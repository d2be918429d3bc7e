package dashboard

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/dispatch"
)

func keyCellJS(queue, key, k string) string {
	return fmt.Sprintf(`(document.querySelector('table[data-queue=%q] tr[data-key=%q] [data-k=%q]') || {}).textContent`, queue, key, k)
}

// TestTheKeysPagesInABrowser: the keys page draws each queue's keys and
// follows the dispatcher without a reload; a key's Pause button pauses it
// and the page then offers Resume. The tenants page marks a held tenant,
// as long as it is held.
func TestTheKeysPagesInABrowser(t *testing.T) {
	st := newStack(t)
	st.setKey(t, "api:stripe", admission.Quota{Limit: admission.NoLimit, MaxInFlight: 20})
	d, hs := st.dashboard(t, Config{})
	now := time.Unix(1_800_000_000, 0)
	stats := func(inFlight int) dispatch.QueueStats {
		return dispatch.QueueStats{Queue: "dash", Now: now, Keys: []dispatch.KeyStats{
			{Key: "api:stripe", InFlight: inFlight, Cap: 20, AtCap: inFlight >= 20, Waiting: 315},
			{Key: "smtp", InFlight: 1, Waiting: 3, Held: true, HeldUntil: now.Add(30 * time.Second)},
		}}
	}
	withStats(d, stats(20))
	ctx := browser(t)

	// A tenant held back in a queue is marked so, and no longer once it is
	// not, without a reload.
	st.setQuota(t, "noisy", admission.Quota{Limit: 100, Window: time.Minute})
	tenant := func(held bool) dispatch.QueueStats {
		s := stats(20)
		s.Tenants = []dispatch.TenantStats{{Tenant: "noisy", Waiting: 3, Held: held}}
		return s
	}
	withStats(d, tenant(true))
	within(t, ctx, 20*time.Second, "loading the tenants page", chromedp.Navigate(hs.URL+"/"))
	waitJS(t, ctx, "noisy held", cellJS("noisy", "held")+` === "held"`)
	withStats(d, tenant(false))
	waitJS(t, ctx, "noisy no longer held", cellJS("noisy", "tenant")+` === "noisy"`)
	withStats(d, stats(20))

	within(t, ctx, 20*time.Second, "loading the keys page", chromedp.Navigate(hs.URL+"/keys"))
	waitJS(t, ctx, "api:stripe's row", keyCellJS("dash", "api:stripe", "in_flight")+` === "20 / 20"`)
	for js, want := range map[string]string{
		keyCellJS("dash", "api:stripe", "waiting"): "315",
		keyCellJS("dash", "api:stripe", "state"):   "at cap",
		keyCellJS("dash", "smtp", "in_flight"):     "1",
		keyCellJS("dash", "smtp", "state"):         "held for 30.0 s",
		`(document.querySelector('#quota-rows tr[data-key="api:stripe"] [data-k="quota"]') || {}).textContent`: "max in flight 20",
	} {
		if got := evalJS[string](t, ctx, js); got != want {
			t.Errorf("%s = %q, want %q", js, got, want)
		}
	}
	shot(t, ctx, "keys.png")
	withStats(d, stats(12))
	waitJS(t, ctx, "api:stripe's row after a refresh", keyCellJS("dash", "api:stripe", "in_flight")+` === "12 / 20"`)

	within(t, ctx, 20*time.Second, "pausing api:stripe from its page",
		chromedp.Navigate(hs.URL+"/keys/api:stripe"),
		chromedp.WaitVisible(`#pause`),
		chromedp.Click(`#pause`),
	)
	waitJS(t, ctx, "the paused badge and the Resume button", `!!document.getElementById("paused") && !!document.getElementById("resume")`)
	if q, err := st.quotas.GetKey(t.Context(), "api:stripe"); err != nil || !q.Paused || q.MaxInFlight != 20 {
		t.Errorf("api:stripe after Pause: %+v, %v; want paused with its cap of 20", q, err)
	}
	// Only its own rows on its page.
	waitJS(t, ctx, "api:stripe's row on its page", keyCellJS("dash", "api:stripe", "in_flight")+` === "12 / 20"`)
	if got := evalJS[int](t, ctx, `document.querySelectorAll("#queues tr[data-key]").length`); got != 1 {
		t.Errorf("api:stripe's page shows %d key rows, want its own only", got)
	}
	shot(t, ctx, "key.png")
}
