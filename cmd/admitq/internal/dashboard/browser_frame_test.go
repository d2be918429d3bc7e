package dashboard

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestABrowserRefusesToFrameAnyPage: a page that frames the dashboard,
// asynqmon included, gets nothing in the frame, so it cannot trick a user
// into clicking there (two clicks deleted every pending task before).
// The framing page is served from the dashboard's own origin, where a frame
// could be read if it loaded: a control frame without the headers does.
func TestABrowserRefusesToFrameAnyPage(t *testing.T) {
	st := newStack(t)
	d, _ := st.dashboard(t, Config{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /framer", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<!doctype html><body>`+
			`<iframe id="control" src="/plain"></iframe>`+
			`<iframe id="asynqmon" src="/asynq/"></iframe>`+
			`<iframe id="tenants" src="/"></iframe>`+
			`<iframe id="login" src="/login"></iframe></body>`)
	})
	mux.HandleFunc("GET /plain", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<!doctype html><p id="loaded">loaded</p>`)
	})
	mux.Handle("/", d)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	ctx := browser(t)

	within(t, ctx, 20*time.Second, "loading the framing page", chromedp.Navigate(hs.URL+"/framer"))
	// A frame that loaded is readable from this same-origin page.
	loaded := func(id string) string {
		return fmt.Sprintf(`(() => { try { const d = document.getElementById(%q).contentDocument; return !!(d && d.body && d.body.innerHTML.length > 0 && d.location.href.startsWith(location.origin)); } catch (e) { return false; } })()`, id)
	}
	waitJS(t, ctx, "the control frame", loaded("control"))
	time.Sleep(time.Second) // the others have had their chance to load
	for _, id := range []string{"asynqmon", "tenants", "login"} {
		if evalJS[bool](t, ctx, loaded(id)) {
			t.Errorf("the %s page loaded in a frame", id)
		}
	}
}
