package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hibiken/asynq"

	"github.com/admitq/admitq/admission"
)

// requireBrowserEnv, set to 1 by make test, turns a missing Chromium from a
// skip into a failure.
const requireBrowserEnv = "ADMITQ_REQUIRE_BROWSER"

// requireChromium returns the path of a Chromium, or skips (fails under
// ADMITQ_REQUIRE_BROWSER=1) where there is none.
func requireChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("ADMITQ_CHROMIUM"), "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH, so the dashboard's browser tests cannot run.\n" +
		"\tInstall it:  sudo apt-get install chromium\n" +
		"\tor run:      make test   (installs it when run as root)"
	if os.Getenv(requireBrowserEnv) == "1" {
		t.Fatal(msg + "\n\t" + requireBrowserEnv + "=1 is set, so this is a failure, not a skip.")
	}
	fmt.Fprintf(os.Stderr, "SKIP %s: %s\n", t.Name(), msg)
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium for the test and returns its tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := requireChromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // root in containers and CI
		chromedp.WindowSize(1440, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelA()
	})
	// The first Run starts the browser; it must not carry a timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// within runs f with a deadline, failing the test with what was being
// waited for.
func within(t *testing.T, ctx context.Context, d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(cctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// waitJS waits until the JavaScript expression is true. It evaluates it
// again and again rather than with chromedp.Poll, which does not survive
// the navigation that a form's submission starts.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	deadline := time.Now().Add(25 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var ok bool
		ok, err = chromedp.Run(cctx, chromedp.Evaluate[bool]("!!("+expr+")"))
		cancel()
		if err == nil && ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	state, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body.innerText.slice(0, 3000)"))
	t.Fatalf("waiting for %s (%s): last error %v\npage text:\n%s", what, expr, err, state)
}

func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func cellJS(tenant, key string) string {
	return fmt.Sprintf(`(document.querySelector('tr[data-tenant=%q] [data-k=%q]') || {}).textContent`, tenant, key)
}

// defaultCellJS is cellJS for the default's row.
func defaultCellJS(key string) string {
	return fmt.Sprintf(`(document.querySelector('tr[data-default] [data-k=%q]') || {}).textContent`, key)
}

// TestDashboardInABrowser drives the dashboard in headless Chromium against
// a real redis-server, a real gate and a real worker.
func TestDashboardInABrowser(t *testing.T) {
	st := newStack(t)
	hour := admission.Quota{Limit: 5, Window: time.Minute, MaxDelay: 10 * time.Minute}
	st.setQuota(t, "acme", hour)
	st.setQuota(t, "steady", admission.Quota{Limit: 100, Window: time.Minute})
	// A tenant named like the default's row, which must not be taken for it.
	st.setQuota(t, DefaultRow, admission.Quota{Limit: 4, Window: time.Minute})
	if err := st.quotas.SetDefault(t.Context(), admission.Quota{Limit: 3, Window: time.Second}); err != nil {
		t.Fatal(err)
	}
	// parker is capped at 1 in flight; its tasks go to a queue no worker
	// reads, so 1 holds the permit and 2 stay parked.
	st.setQuota(t, "parker", admission.Quota{Limit: 100, Window: time.Minute, MaxInFlight: 1, MaxParked: 10})
	st.serve(t, "idle")
	for range 3 {
		if _, _, err := st.client.Enqueue(t.Context(), "parker", asynq.NewTask("job", nil), asynq.Queue("idle")); err != nil {
			t.Fatal(err)
		}
	}
	st.startWorker(t)
	d, hs := st.dashboard(t, Config{})
	_ = d
	ctx := browser(t)

	// The dashboard's first sample is the baseline: wait for it, so that
	// every decision below is counted as a rate.
	waitRates(t, hs.URL)
	st.send(t, "acme", 8) // 5 admitted now, 3 deferred a minute ahead

	t.Run("tenants page shows the right numbers", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "loading the tenants page", chromedp.Navigate(hs.URL+"/"))
		waitJS(t, ctx, "acme's window", cellJS("acme", "in_window")+` === "5 / 5"`)
		u, err := st.gate.Usage(t.Context(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		if got := evalJS[string](t, ctx, cellJS("acme", "reserved")); got != fmt.Sprint(u.Reserved) || u.Reserved != 3 {
			t.Errorf("reserved ahead: page %q, gate %d, want 3", got, u.Reserved)
		}
		if got := evalJS[string](t, ctx, cellJS("acme", "next_free")); !strings.HasPrefix(got, "in ") || !u.NextFree.After(u.Now.Add(50*time.Second)) {
			t.Errorf("next free slot: page %q, gate %v after now; want about a minute ahead", got, u.NextFree.Sub(u.Now))
		}
		if got := evalJS[string](t, ctx, cellJS("acme", "quota")); got != hour.String() {
			t.Errorf("quota: page %q, want %q", got, hour.String())
		}
		if got := evalJS[string](t, ctx, cellJS("parker", "in_flight")+` + " | " + `+cellJS("parker", "parked")); !strings.HasPrefix(got, "1 / 1 (at cap) | 2 (oldest ") {
			t.Errorf("parker's in flight | parked: page %q, want 1 / 1 (at cap) | 2 (oldest …)", got)
		}
		if got := evalJS[string](t, ctx, `(document.querySelector('tr[data-tenant="parker"] [data-k="in_flight"]') || {}).title`); got != "share of worker time 0% (weight 1)" {
			t.Errorf("parker's in-flight cell's title %q, want its share of worker time and weight", got)
		}
		if got := evalJS[string](t, ctx, cellJS("acme", "in_flight")); got != "" {
			t.Errorf("acme, uncapped, shows in flight %q", got)
		}
		if got := evalJS[string](t, ctx, defaultCellJS("quota")); got != "3/1s" {
			t.Errorf("default row: page %q, want 3/1s", got)
		}
		if got := evalJS[string](t, ctx, cellJS(DefaultRow, "quota")+` + " | " + `+cellJS(DefaultRow, "in_window")); got != "4/1m0s | 0 / 4" {
			t.Errorf("the tenant named %q: page %q, want its own row, 4/1m0s | 0 / 4", DefaultRow, got)
		}
		// The charts hold what the producer and the worker counted: 5
		// admitted, 3 deferred, and the 5 admitted tasks started.
		row := `document.querySelector('tr[data-tenant="acme"]').dataset`
		waitJS(t, ctx, "acme's rates", row+`.admitted === "5" && `+row+`.deferred === "3" && `+row+`.rejected === "0" && `+row+`.started === "5"`)
		shot(t, ctx, "tenants.png")
	})

	t.Run("a change shows up without a reload", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "loading the tenants page", chromedp.Navigate(hs.URL+"/"))
		waitJS(t, ctx, "steady's row", cellJS("steady", "in_window")+` === "0 / 100"`)
		evalJS[bool](t, ctx, `window.__sameDocument = true`)
		before := evalJS[string](t, ctx, `document.getElementById("rows").dataset.updates`)
		st.send(t, "steady", 2)
		waitJS(t, ctx, "steady's new window", cellJS("steady", "in_window")+` === "2 / 100"`)
		waitJS(t, ctx, "steady's decisions in the chart", `document.querySelector('tr[data-tenant="steady"]').dataset.admitted === "2"`)
		if !evalJS[bool](t, ctx, `window.__sameDocument === true`) {
			t.Error("the page reloaded; want a live update")
		}
		if after := evalJS[string](t, ctx, `document.getElementById("rows").dataset.updates`); after == before {
			t.Errorf("updates counter still %s", after)
		}
	})

	t.Run("a quota set through the form is in Redis", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "setting a quota",
			chromedp.Navigate(hs.URL+"/"),
			chromedp.SetValue(`#new-quota input[name="tenant"]`, "globex"),
			chromedp.SetValue(`#new-quota input[name="limit"]`, "7"),
			chromedp.SetValue(`#new-quota input[name="window"]`, "30s"),
			chromedp.SetValue(`#new-quota input[name="max-delay"]`, "5s"),
			chromedp.SetValue(`#new-quota select[name="mode"]`, "counter"),
			chromedp.Submit(`#new-quota`),
		)
		waitJS(t, ctx, "the saved banner", `!!document.getElementById("saved")`)
		got, err := st.quotas.Get(t.Context(), "globex")
		want := admission.Quota{Limit: 7, Window: 30 * time.Second, MaxDelay: 5 * time.Second, Mode: admission.Counter}
		if err != nil || got != want {
			t.Errorf("quotas.Get(globex) = %v, %v; want %v", got, err, want)
		}
		if log := st.log.String(); !strings.Contains(log, `msg="dashboard: quota set" tenant=globex quota="7/30s, max delay 5s, counter" by="loopback 127.0.0.1:`) {
			t.Errorf("the change is not logged with who made it; log:\n%s", log)
		}
	})

	t.Run("an invalid quota shows its error and writes nothing", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "sending a bad quota",
			chromedp.Navigate(hs.URL+"/tenants/globex"),
			chromedp.SetValue(`#quota-form input[name="limit"]`, "0"),
			chromedp.SetValue(`#quota-form input[name="window"]`, "soon"),
			chromedp.Submit(`#quota-form`),
		)
		waitJS(t, ctx, "the field errors", `!!document.querySelector('.err[data-field="limit"]')`)
		if got := evalJS[string](t, ctx, `document.querySelector('.err[data-field="limit"]').textContent`); got != "0: want at least 1" {
			t.Errorf("limit's error: %q, want %q (the CLI's --limit message)", got, "0: want at least 1")
		}
		if got := evalJS[string](t, ctx, `document.querySelector('.err[data-field="window"]').textContent`); !strings.Contains(got, "want a duration") {
			t.Errorf("window's error: %q", got)
		}
		// The form keeps what was typed, next to its error.
		if got := evalJS[string](t, ctx, `document.querySelector('#quota-form input[name="window"]').value`); got != "soon" {
			t.Errorf("window field: %q, want what was typed", got)
		}
		if got, _ := st.quotas.Get(t.Context(), "globex"); got.Limit != 7 {
			t.Errorf("globex's quota changed to %v", got)
		}
	})

	t.Run("asynqmon loads under /asynq/", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "loading asynqmon", chromedp.Navigate(hs.URL+"/asynq/"))
		waitJS(t, ctx, "asynqmon's queue list naming the queue", `document.body.innerText.includes(`+fmt.Sprintf("%q", testQueue)+`) && document.body.innerText.includes("Queues")`)
	})

	t.Run("a tenant named like the default's row has its own page", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "loading its page", chromedp.Navigate(hs.URL+"/tenants/"+url.PathEscape(DefaultRow)))
		waitJS(t, ctx, "its own window", `document.getElementById("st-window").textContent === "0 / 4"`)
		within(t, ctx, 20*time.Second, "loading the default's page", chromedp.Navigate(hs.URL+"/default"))
		waitJS(t, ctx, "the default's refresh, asked for by default=1", `performance.getEntriesByType("resource").some(e => e.name.includes("/api/tenant?default=1&"))`)
	})

	t.Run("the tenant page draws the window as a timeline", func(t *testing.T) {
		within(t, ctx, 20*time.Second, "loading acme's page", chromedp.Navigate(hs.URL+"/tenants/acme"))
		waitJS(t, ctx, "acme's stats and timeline", `document.getElementById("st-window").textContent === "5 / 5" && document.getElementById("st-reserved").textContent === "3" && /^8 slots/.test(document.getElementById("timeline-note").textContent)`)
		if n := evalJS[float64](t, ctx, `document.querySelectorAll('#entries a[href^="/asynq/queues/dash/tasks/"]').length`); n != 8 {
			t.Errorf("%v entries link to their task in asynqmon, want 8", n)
		}
	})
}

// TestDashboardRefusesWritesWithoutTheToken drives a dashboard that has a
// token: a write without it is refused and writes nothing; with it, it
// goes through, and the page never shows the token.
func TestDashboardRefusesWritesWithoutTheToken(t *testing.T) {
	st := newStack(t)
	st.setQuota(t, "acme", admission.Quota{Limit: 5, Window: time.Minute})
	const token = "t0ken-that-must-not-leak"
	_, hs := st.dashboard(t, Config{Token: token})
	ctx := browser(t)

	within(t, ctx, 20*time.Second, "loading the sign-in page", chromedp.Navigate(hs.URL+"/"))
	if title := evalJS[string](t, ctx, "document.title"); !strings.HasPrefix(title, "Sign in") {
		t.Fatalf("without the token / shows %q, want the sign-in page", title)
	}
	status := evalJS[float64](t, ctx, `fetch("/quota", {method: "POST", body: new URLSearchParams({action: "set", tenant: "acme", limit: "1", window: "1s", mode: "log"})}).then(r => r.status)`)
	if status != http.StatusUnauthorized {
		t.Errorf("a write without the token got %v, want 401", status)
	}
	if q, _ := st.quotas.Get(t.Context(), "acme"); q.Limit != 5 {
		t.Errorf("acme's quota changed to %v", q)
	}

	within(t, ctx, 20*time.Second, "signing in",
		chromedp.SetValue(`input[name="token"]`, "wrong"),
		chromedp.Submit(`form.login`),
	)
	waitJS(t, ctx, "the wrong-token message", `document.body.innerText.includes("not the dashboard's token")`)
	within(t, ctx, 20*time.Second, "signing in",
		chromedp.SetValue(`input[name="token"]`, token),
		chromedp.Submit(`form.login`),
	)
	waitJS(t, ctx, "acme's row", cellJS("acme", "in_window")+` === "0 / 5"`)
	within(t, ctx, 20*time.Second, "setting a quota",
		chromedp.Navigate(hs.URL+"/tenants/acme"),
		chromedp.SetValue(`#quota-form input[name="limit"]`, "9"),
		chromedp.Submit(`#quota-form`),
	)
	waitJS(t, ctx, "the saved banner", `!!document.getElementById("saved")`)
	if q, _ := st.quotas.Get(t.Context(), "acme"); q.Limit != 9 {
		t.Errorf("with the token, acme's quota is %v, want limit 9", q)
	}
	html := evalJS[string](t, ctx, `document.documentElement.outerHTML + document.cookie`)
	if strings.Contains(html, token) || strings.Contains(st.log.String(), token) {
		t.Error("the token shows in the page, a readable cookie or the log")
	}
	if !strings.Contains(st.log.String(), `by="token holder at 127.0.0.1:`) {
		t.Errorf("the change is not logged as the token holder's:\n%s", st.log.String())
	}
}

// shot saves a screenshot of the page under the test's temporary directory,
// and under docs/ when ADMITQ_SCREENSHOTS names that directory.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dirs := []string{t.TempDir()}
	if d := os.Getenv("ADMITQ_SCREENSHOTS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waitRates waits until the dashboard has sampled its sources once.
func waitRates(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/api/tenants")
		if err == nil {
			var b strings.Builder
			_, _ = fmt.Fprint(&b, "")
			buf := make([]byte, 1<<16)
			n, _ := resp.Body.Read(buf)
			resp.Body.Close()
			if strings.Contains(string(buf[:n]), `"times":[1`) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("the dashboard took no sample of the metrics in 10s")
}
