package dashboard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
)

// TestTheBrowserShowsEveryTenantAndOutcome drives the tenants page and a
// tenant's page in Chromium: tenants on the default that are active are
// listed and found by search, parked decisions are charted, long names are
// shortened and a tenant named "(default)" is quoted as the command quotes
// it, counts are singular when they are 1, the window chart's tick labels
// are told apart, and the weight is set through the form.
func TestTheBrowserShowsEveryTenantAndOutcome(t *testing.T) {
	st := newStack(t)
	long := strings.Repeat("very-long-tenant-name-", 3) + "end" // 69 characters
	st.setQuota(t, long, admission.Quota{Limit: 10, Window: time.Minute})
	st.setQuota(t, DefaultRow, admission.Quota{Limit: 4, Window: time.Minute})
	if err := st.quotas.SetDefault(t.Context(), admission.Quota{Limit: 20, Window: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// parker is capped at 1 in flight, on the default otherwise; its tasks
	// go to a queue no worker reads, so 1 holds the permit and 2 park.
	st.setQuota(t, "onesec", admission.Quota{Limit: 10, Window: time.Second})
	st.setQuota(t, "parker", admission.Quota{Limit: 100, Window: time.Second, MaxInFlight: 1})
	st.startWorker(t)
	d, hs := st.dashboard(t, Config{})
	ctx := browser(t)
	waitRates(t, hs.URL)
	st.send(t, "visitor", 2) // on the default: no quota of its own
	parked := 0
	for range 3 {
		_, dec, err := st.client.Enqueue(t.Context(), "parker", asynq.NewTask("job", nil), asynq.Queue("idle"))
		if err != nil {
			t.Fatal(err)
		}
		st.metrics.ObserveDecision(dec)
		if dec.Outcome == admission.Parked {
			parked++
		}
	}

	t.Run("a tenant on the default is listed and found", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "loading the tenants page", chromedp.Navigate(hs.URL+"/"))
		waitJS(t, ctx, "visitor's row", cellJS("visitor", "in_window")+` === "2 / 20"`)
		if got := evalJS[string](t, ctx, cellJS("visitor", "tenant")); got != "visitordefault" {
			t.Errorf("visitor's name cell %q, want the name and a default badge", got)
		}
		if got := evalJS[string](t, ctx, cellJS("visitor", "quota")); got != "20/1m0s (default)" {
			t.Errorf("visitor's quota %q", got)
		}
		waitJS(t, ctx, "the summary", `document.getElementById("summary").textContent.startsWith("4 tenants with a quota of their own, 1 on the default")`)
		within(t, ctx, 20*time.Second, "searching", chromedp.Navigate(hs.URL+"/?q=visit"))
		waitJS(t, ctx, "the one match", `document.getElementById("summary").textContent.includes(", 1 matches")`)
		if n := evalJS[float64](t, ctx, `document.querySelectorAll("#rows tr[data-tenant]").length`); n != 1 {
			t.Errorf("%v rows for q=visit, want 1", n)
		}
		if got := evalJS[string](t, ctx, `document.querySelector("tr[data-default] [data-k=others]").textContent`); got != "1 tenant on it, marked default" {
			t.Errorf("the default row says %q", got)
		}
		shot(t, ctx, "tenants-default.png")
	})

	t.Run("parked decisions are charted", func(t *testing.T) {
		if parked != 2 {
			t.Skipf("%d of 3 parked: the producer parks only where it sees a worker with a gate", parked)
		}
		within(t, ctx, 20*time.Second, "loading the tenants page", chromedp.Navigate(hs.URL+"/?q=parker"))
		row := `document.querySelector('tr[data-tenant="parker"]').dataset`
		waitJS(t, ctx, "parker's rates", row+`.admitted === "1" && `+row+`.parked === "2"`)
		if got := evalJS[string](t, ctx, `document.querySelector("thead").textContent`); !strings.Contains(got, "parked") {
			t.Errorf("the decisions key has no parked: %q", got)
		}
		if got := evalJS[string](t, ctx, cellJS("parker", "decisions_now")); strings.Count(got, "·") != 3 {
			t.Errorf("decisions now %q, want four outcomes", got)
		}
	})

	t.Run("names are shown as the command shows them", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "loading the tenants page", chromedp.Navigate(hs.URL+"/"))
		waitJS(t, ctx, "the long name's row", fmt.Sprintf(`!!document.querySelector('tr[data-tenant=%q] a')`, long))
		a := fmt.Sprintf(`document.querySelector('tr[data-tenant=%q] a')`, long)
		if got := evalJS[string](t, ctx, a+`.textContent`); got != long[:39]+"…" {
			t.Errorf("long name shown as %q", got)
		}
		if got := evalJS[string](t, ctx, a+`.title`); got != long {
			t.Errorf("long name's title %q", got)
		}
		if got := evalJS[string](t, ctx, fmt.Sprintf(`document.querySelector('tr[data-tenant=%q] a').textContent`, DefaultRow)); got != `"(default)"` {
			t.Errorf("the tenant named (default) shows as %q, want it quoted", got)
		}
		if got := evalJS[string](t, ctx, `document.querySelector('tr[data-default] a').textContent`); got != DefaultRow {
			t.Errorf("the default's row shows as %q", got)
		}
	})

	t.Run("a one-second window's ticks are told apart", func(t *testing.T) {
		st.send(t, "onesec", 1)
		within(t, ctx, 20*time.Second, "loading onesec's page", chromedp.Navigate(hs.URL+"/tenants/onesec"))
		waitJS(t, ctx, "the timeline's ticks", `!!document.getElementById("timeline").dataset.ticks`)
		ticks := strings.Fields(evalJS[string](t, ctx, `document.getElementById("timeline").dataset.ticks`))
		seen := map[string]bool{}
		for _, tk := range ticks {
			if seen[tk] {
				t.Errorf("tick %q repeats: %v", tk, ticks)
			}
			seen[tk] = true
		}
		t.Logf("ticks: %v", ticks)
		if len(ticks) < 3 {
			t.Errorf("ticks %v", ticks)
		}
		waitJS(t, ctx, "the timeline note", `/^\d+ slots? shown/.test(document.getElementById("timeline-note").textContent)`)
		if note := evalJS[string](t, ctx, `document.getElementById("timeline-note").textContent`); strings.HasPrefix(note, "1 slots") {
			t.Errorf("timeline note %q", note)
		}
	})

	t.Run("the weight is set through the form and shown", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "setting a weight",
			chromedp.Navigate(hs.URL+"/tenants/visitor"),
			chromedp.SetValue(`#quota-form input[name="limit"]`, "6"),
			chromedp.SetValue(`#quota-form input[name="window"]`, "1m"),
			chromedp.SetValue(`#quota-form input[name="weight"]`, "3"),
			chromedp.Submit(`#quota-form`),
		)
		waitJS(t, ctx, "the saved banner", `!!document.getElementById("saved")`)
		got, err := st.quotas.Get(t.Context(), "visitor")
		if err != nil || got.Weight != 3 || got.Limit != 6 {
			t.Errorf("visitor's quota %v, %v; want limit 6, weight 3", got, err)
		}
		if own := evalJS[string](t, ctx, `document.getElementById("own").textContent`); !strings.Contains(own, "weight 3") {
			t.Errorf("the page shows %q, want the weight", own)
		}
		if v := evalJS[string](t, ctx, `document.querySelector('#quota-form input[name="weight"]').value`); v != "3" {
			t.Errorf("weight field %q", v)
		}
		d.forgetList()
		within(t, ctx, 20*time.Second, "loading the tenants page", chromedp.Navigate(hs.URL+"/?q=visitor"))
		waitJS(t, ctx, "visitor's own quota with its weight", cellJS("visitor", "quota")+` === "6/1m0s, weight 3"`)

		within(t, ctx, 20*time.Second, "sending a bad weight",
			chromedp.Navigate(hs.URL+"/tenants/visitor"),
			chromedp.SetValue(`#quota-form input[name="weight"]`, "-1"),
			chromedp.Submit(`#quota-form`),
		)
		waitJS(t, ctx, "the weight's error", `!!document.querySelector('.err[data-field="weight"]')`)
		if got, _ := st.quotas.Get(t.Context(), "visitor"); got.Weight != 3 {
			t.Errorf("a bad weight changed the quota to %v", got)
		}
	})
}
