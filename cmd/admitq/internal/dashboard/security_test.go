package dashboard

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func do(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func signIn(t *testing.T, base, token, next string, header http.Header) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(url.Values{"token": {token}, "next": {next}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	return do(t, req)
}

func TestEveryRouteRefusesToBeFramed(t *testing.T) {
	st := newStack(t)
	_, open := st.dashboard(t, Config{})
	_, tok := st.dashboard(t, Config{Token: "sekrit"})
	for _, c := range []struct{ desc, base, method, path string }{
		{"the tenants page", open.URL, "GET", "/"},
		{"the tenants API", open.URL, "GET", "/api/tenants"},
		{"asynqmon's page", open.URL, "GET", "/asynq/"},
		{"asynqmon's API", open.URL, "GET", "/asynq/api/queues"},
		{"a write to asynqmon's API", open.URL, "DELETE", "/asynq/api/queues/dash/pending_tasks:delete_all"},
		{"a static file", open.URL, "GET", "/static/app.js"},
		{"a page that is not there", open.URL, "GET", "/nope"},
		{"asynqmon without the token", tok.URL, "GET", "/asynq/"},
		{"asynqmon's API without the token", tok.URL, "GET", "/asynq/api/queues"},
		{"the sign-in page", tok.URL, "GET", "/login"},
	} {
		t.Run(c.desc, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, c.base+c.path, nil)
			resp := do(t, req)
			if got := resp.Header.Get("X-Frame-Options"); got != "DENY" {
				t.Errorf("%s %s: X-Frame-Options %q, want DENY", c.method, c.path, got)
			}
			if got := resp.Header.Get("Content-Security-Policy"); !strings.Contains(got, "frame-ancestors 'none'") {
				t.Errorf("%s %s: Content-Security-Policy %q, want frame-ancestors 'none'", c.method, c.path, got)
			}
		})
	}
}

func TestFormsTakeOnlySmallURLEncodedBodies(t *testing.T) {
	st := newStack(t)
	_, hs := st.dashboard(t, Config{Token: "sekrit"})
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)

	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	fw, _ := mw.CreateFormFile("token", "big")
	_, _ = fw.Write(bytes.Repeat([]byte("x"), 20<<20))
	mw.Close()
	for _, c := range []struct {
		desc, path, ctype string
		body              []byte
		want              int
	}{
		{"a multipart sign-in", "/login", mw.FormDataContentType(), mp.Bytes(), http.StatusUnsupportedMediaType},
		{"a multipart quota form", "/quota", mw.FormDataContentType(), mp.Bytes(), http.StatusUnsupportedMediaType},
		{"a sign-in without a content type", "/login", "", []byte("token=sekrit"), http.StatusUnsupportedMediaType},
		{"a URL-encoded sign-in of 2 MB", "/login", "application/x-www-form-urlencoded", append([]byte("token="), bytes.Repeat([]byte("x"), 2<<20)...), http.StatusRequestEntityTooLarge},
	} {
		t.Run(c.desc, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, hs.URL+c.path, bytes.NewReader(c.body))
			if c.ctype != "" {
				req.Header.Set("Content-Type", c.ctype)
			}
			req.Header.Set("Authorization", "Bearer sekrit")
			resp := do(t, req)
			if resp.StatusCode != c.want {
				t.Errorf("status %d, want %d", resp.StatusCode, c.want)
			}
		})
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "*"))
	left2, _ := filepath.Glob(filepath.Join(os.TempDir(), "multipart-*"))
	if len(left) > 0 || len(left2) > 0 {
		t.Errorf("files left in the temporary directory: %v %v", left, left2)
	}
}

func TestNextStaysOnThisSite(t *testing.T) {
	for _, c := range []struct{ next, want string }{
		{"/tenants/acme?x=1", "/tenants/acme?x=1"},
		{"/default", "/default"},
		{"/\t/evil.example", "/"},
		{"/%09/evil.example", "/"},
		{"/%2F/evil.example", "/"},
		{"/%5Cevil.example", "/"},
		{"//evil.example", "/"},
		{"/\\evil.example", "/"},
		{"\\\\evil.example", "/"},
		{"https://evil.example/", "/"},
		{"javascript:alert(1)", "/"},
		{"evil.example", "/"},
		{"/\r\n/evil.example", "/"},
		{"/\x00/evil.example", "/"},
		{"", "/"},
	} {
		if got := safeNext(c.next); got != c.want {
			t.Errorf("safeNext(%q) = %q, want %q", c.next, got, c.want)
		}
	}

	st := newStack(t)
	_, hs := st.dashboard(t, Config{Token: "sekrit"})
	for _, next := range []string{"/\t/evil.example", "/%09/evil.example", "//evil.example", "/\\evil.example", "https://evil.example"} {
		resp := signIn(t, hs.URL, "sekrit", next, nil)
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/" {
			t.Errorf("sign-in with next=%q: %d to %q, want 303 to /", next, resp.StatusCode, loc)
		}
	}
	resp := signIn(t, hs.URL, "sekrit", "/tenants/acme", nil)
	if loc := resp.Header.Get("Location"); loc != "/tenants/acme" {
		t.Errorf("sign-in with next=/tenants/acme goes to %q", loc)
	}
}

func sessionOf(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	t.Fatalf("no session cookie in %v", resp.Header)
	return nil
}

func withCookie(t *testing.T, base, path string, c *http.Cookie) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	req.AddCookie(c)
	return do(t, req).StatusCode
}

func TestASessionEndsAtLogoutAndExpiresOnTheServer(t *testing.T) {
	st := newStack(t)
	d, hs := st.dashboard(t, Config{Token: "sekrit"})
	a := sessionOf(t, signIn(t, hs.URL, "sekrit", "/", nil))
	b := sessionOf(t, signIn(t, hs.URL, "sekrit", "/", nil))
	if a.Value == b.Value {
		t.Fatal("two sign-ins got the same session cookie")
	}
	if strings.Contains(a.Value, "sekrit") || !a.HttpOnly || a.SameSite != http.SameSiteStrictMode || a.MaxAge <= 0 {
		t.Errorf("session cookie %+v", a)
	}
	if got := withCookie(t, hs.URL, "/api/tenants", a); got != http.StatusOK {
		t.Fatalf("with a fresh session: %d", got)
	}

	req, _ := http.NewRequest(http.MethodPost, hs.URL+"/logout", nil)
	req.AddCookie(a)
	do(t, req)
	if got := withCookie(t, hs.URL, "/api/tenants", a); got != http.StatusUnauthorized {
		t.Errorf("the cookie replayed after logout: %d, want 401", got)
	}
	if got := withCookie(t, hs.URL, "/api/tenants", b); got != http.StatusOK {
		t.Errorf("another session after the first's logout: %d, want 200", got)
	}

	// Expiry: the server's clock, not the cookie's.
	d.sessions.mu.Lock()
	d.sessions.m[b.Value] = time.Now().Add(-time.Second)
	d.sessions.mu.Unlock()
	if got := withCookie(t, hs.URL, "/api/tenants", b); got != http.StatusUnauthorized {
		t.Errorf("an expired session: %d, want 401", got)
	}
	if got := withCookie(t, hs.URL, "/api/tenants", &http.Cookie{Name: sessionCookie, Value: strings.Repeat("0", 64)}); got != http.StatusUnauthorized {
		t.Errorf("a made-up session: %d, want 401", got)
	}
}

func TestSignInAttemptsAreLimited(t *testing.T) {
	st := newStack(t)
	_, hs := st.dashboard(t, Config{Token: "sekrit"})
	const guesses = 200
	codes := map[int]int{}
	start := time.Now()
	for i := range guesses {
		codes[signIn(t, hs.URL, "guess"+strings.Repeat("x", i%7), "/", nil).StatusCode]++
	}
	t.Logf("%d guesses in %v: %v", guesses, time.Since(start).Round(time.Millisecond), codes)
	if codes[http.StatusUnauthorized] > loginBurst+1 {
		t.Errorf("%d of %d guesses were checked, want at most %d", codes[http.StatusUnauthorized], guesses, loginBurst+1)
	}
	if codes[http.StatusTooManyRequests] < guesses-loginBurst-1 {
		t.Errorf("only %d of %d guesses were refused as too many", codes[http.StatusTooManyRequests], guesses)
	}
	// The right token is refused too while the address is over its limit:
	// otherwise the 429 itself would tell a guess apart.
	resp := signIn(t, hs.URL, "sekrit", "/", nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("the token over the limit: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestTheLimiterRefillsOverTime(t *testing.T) {
	l := newLoginLimiter(2, time.Second)
	t0 := time.Unix(1000, 0)
	for i, want := range []bool{true, true, false} {
		if ok, _ := l.take("a", t0); ok != want {
			t.Errorf("attempt %d: %v, want %v", i, ok, want)
		}
	}
	if ok, _ := l.take("b", t0); !ok {
		t.Error("another address shares the first's bucket")
	}
	if ok, wait := l.take("a", t0.Add(500*time.Millisecond)); ok || wait != 500*time.Millisecond {
		t.Errorf("half a second later: %v, wait %v", ok, wait)
	}
	if ok, _ := l.take("a", t0.Add(1100*time.Millisecond)); !ok {
		t.Error("a second later the bucket has not refilled")
	}
}

func TestCookiesAreSecureOverTLSOrATrustedProxy(t *testing.T) {
	st := newStack(t)
	_, plain := st.dashboard(t, Config{Token: "sekrit"})
	_, proxied := st.dashboard(t, Config{Token: "sekrit", TrustProxy: true})
	https := http.Header{"X-Forwarded-Proto": {"https"}}
	for _, c := range []struct {
		desc   string
		base   string
		header http.Header
		want   bool
	}{
		{"plain HTTP", plain.URL, nil, false},
		{"X-Forwarded-Proto from a proxy that is not trusted", plain.URL, https, false},
		{"X-Forwarded-Proto: https from a trusted proxy", proxied.URL, https, true},
		{"X-Forwarded-Proto: http from a trusted proxy", proxied.URL, http.Header{"X-Forwarded-Proto": {"http"}}, false},
	} {
		if got := sessionOf(t, signIn(t, c.base, "sekrit", "/", c.header)).Secure; got != c.want {
			t.Errorf("%s: Secure %v, want %v", c.desc, got, c.want)
		}
	}
}

// TestBearerGuessesAreLimitedToo: the Authorization header is another way
// to guess the token, so it shares the sign-in limit.
func TestBearerGuessesAreLimitedToo(t *testing.T) {
	st := newStack(t)
	_, hs := st.dashboard(t, Config{Token: "sekrit"})
	bearer := func(token string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+"/api/tenants", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return do(t, req)
	}
	// A right token costs nothing: many calls in a row all pass.
	for i := range 3 * loginBurst {
		if got := bearer("sekrit").StatusCode; got != http.StatusOK {
			t.Fatalf("call %d with the token: %d", i, got)
		}
	}
	codes := map[int]int{}
	for range 100 {
		codes[bearer("guess").StatusCode]++
	}
	if codes[http.StatusUnauthorized] > loginBurst || codes[http.StatusTooManyRequests] < 100-loginBurst {
		t.Errorf("100 wrong bearer tokens: %v, want at most %d checked", codes, loginBurst)
	}
	if resp := bearer("sekrit"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("the token over the limit: %d", resp.StatusCode)
	}
}
