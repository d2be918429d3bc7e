package dashboard

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
		{"the keys page", open.URL, "GET", "/keys"},
		{"a key's page", open.URL, "GET", "/keys/api:stripe"},
		{"the keys API", open.URL, "GET", "/api/keys"},
		{"a key's pause button", open.URL, "POST", "/key"},
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
		{"a multipart key form", "/key", mw.FormDataContentType(), mp.Bytes(), http.StatusUnsupportedMediaType},
		{"a URL-encoded key form of 2 MB", "/key", "application/x-www-form-urlencoded", append([]byte("key="), bytes.Repeat([]byte("x"), 2<<20)...), http.StatusRequestEntityTooLarge},
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

// dashboardPacing is st.dashboard with sign-in attempts coming back one
// every every, so that a test sees the limiter's pace in milliseconds.
func (st *stack) dashboardPacing(t *testing.T, cfg Config, every time.Duration) *httptest.Server {
	t.Helper()
	cfg.Redis = st.rdb
	cfg.Queue = testQueue
	cfg.Logger = slog.New(slog.NewTextHandler(st.log, nil))
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.logins = newLoginLimiter(loginBurst, every, loginQueue)
	hs := httptest.NewServer(d)
	t.Cleanup(func() {
		hs.Close()
		_ = d.Close()
	})
	return hs
}

// guessAll sends n sign-ins with a wrong token at once, with header, and
// counts the answers by status; -429 counts those without Retry-After.
func guessAll(t *testing.T, base string, n int, header http.Header) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp := signIn(t, base, "guess"+strings.Repeat("x", i%7), "/", header)
			mu.Lock()
			codes[resp.StatusCode]++
			if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
				codes[-resp.StatusCode]++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}

func TestSignInAttemptsAreLimited(t *testing.T) {
	st := newStack(t)
	const every = 300 * time.Millisecond
	hs := st.dashboardPacing(t, Config{Token: "sekrit"}, every)
	const guesses = 60
	start := time.Now()
	codes := guessAll(t, hs.URL, guesses, nil)
	elapsed := time.Since(start)
	t.Logf("%d guesses at once in %v: %v", guesses, elapsed.Round(time.Millisecond), codes)
	// The burst is compared at once, loginQueue more in their turns, one
	// per every, and a turn may come back while the others are refused.
	most := loginBurst + loginQueue + int(elapsed/every) + 1
	if codes[http.StatusUnauthorized] > most {
		t.Errorf("%d of %d guesses were compared, want at most %d in %v", codes[http.StatusUnauthorized], guesses, most, elapsed)
	}
	if codes[http.StatusUnauthorized]+codes[http.StatusTooManyRequests] != guesses || codes[http.StatusTooManyRequests] == 0 {
		t.Errorf("answers %v, want 401 and 429 only, and some 429", codes)
	}
	if codes[-http.StatusTooManyRequests] > 0 {
		t.Errorf("%d answers 429 without Retry-After", codes[-http.StatusTooManyRequests])
	}
}

// TestTheRightTokenGetsInWhileItsAddressIsLimited: an address past its
// burst of wrong tokens waits its turn, and the right token then signs in
// (by form and by bearer header), where it used to be refused with the
// guesses, which locked every operator behind one proxy out.
func TestTheRightTokenGetsInWhileItsAddressIsLimited(t *testing.T) {
	st := newStack(t)
	const every = 200 * time.Millisecond
	hs := st.dashboardPacing(t, Config{Token: "sekrit"}, every)
	for i := range loginBurst {
		if got := signIn(t, hs.URL, "guess", "/", nil).StatusCode; got != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i, got)
		}
	}
	start := time.Now()
	resp := signIn(t, hs.URL, "sekrit", "/", nil)
	if resp.StatusCode != http.StatusSeeOther || sessionOf(t, resp) == nil {
		t.Fatalf("the right token past the burst: %d, want 303 and a session", resp.StatusCode)
	}
	if waited := time.Since(start); waited < every/2 {
		t.Errorf("the right token past the burst was compared after %v, want its turn (about %v): a limited address must not compare at once", waited, every)
	}
	for range loginBurst {
		signIn(t, hs.URL, "guess", "/", nil)
	}
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/api/tenants", nil)
	req.Header.Set("Authorization", "Bearer sekrit")
	if got := do(t, req).StatusCode; got != http.StatusOK {
		t.Errorf("the right bearer token past the burst: %d, want 200", got)
	}
}

// TestSignInLimitIsPerClientAddress: behind a trusted proxy, each client
// address the proxy saw has its own limit, and what a client writes left
// of it in X-Forwarded-For changes nothing; without --trust-proxy the
// header is ignored.
func TestSignInLimitIsPerClientAddress(t *testing.T) {
	st := newStack(t)
	proxied := st.dashboardPacing(t, Config{Token: "sekrit", TrustProxy: true}, time.Minute)
	direct := st.dashboardPacing(t, Config{Token: "sekrit"}, time.Minute)
	from := func(hops string) http.Header { return http.Header{"X-Forwarded-For": {hops}} }

	// With every at a minute, the queue does not move during the test:
	// fill it with the burst, then attempts that wait their turn (their
	// requests given up after a moment: the turn stays taken), until one
	// is refused.
	fill := func(base string, header http.Header) {
		t.Helper()
		for range loginBurst {
			if got := signIn(t, base, "guess", "/", header).StatusCode; got != http.StatusUnauthorized {
				t.Fatalf("a guess within the burst: %d", got)
			}
		}
		for i := 0; ; i++ {
			if i > loginQueue {
				t.Fatalf("%d attempts past the burst waited their turn, want %d", i, loginQueue)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/login", strings.NewReader("token=guess"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, v := range header {
				req.Header[k] = v
			}
			resp, err := noRedirect.Do(req)
			cancel()
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("an attempt past the burst, with every a minute: %d, want it to wait or 429", resp.StatusCode)
				}
				return
			}
		}
	}

	fill(proxied.URL, from("203.0.113.1"))
	for _, c := range []struct {
		desc string
		hops http.Header
		want int
	}{
		{"the limited client", from("203.0.113.1"), http.StatusTooManyRequests},
		{"the limited client, with a made-up hop left of it", from("198.51.100.7, 203.0.113.1"), http.StatusTooManyRequests},
		{"the limited client, then a proxy on loopback", from("203.0.113.1, 127.0.0.1"), http.StatusTooManyRequests},
		{"the limited client, by X-Real-IP", http.Header{"X-Real-IP": {"203.0.113.1"}}, http.StatusTooManyRequests},
		{"another client", from("203.0.113.2"), http.StatusUnauthorized},
		{"another client, naming the limited one left of it", from("203.0.113.1, 203.0.113.2"), http.StatusUnauthorized},
		{"another client, by X-Real-IP", http.Header{"X-Real-IP": {"203.0.113.3"}}, http.StatusUnauthorized},
	} {
		if got := signInStatus(t, proxied.URL, c.hops); got != c.want {
			t.Errorf("behind a trusted proxy, %s: %d, want %d", c.desc, got, c.want)
		}
	}

	fill(direct.URL, from("203.0.113.1"))
	if got := signInStatus(t, direct.URL, from("203.0.113.2")); got != http.StatusTooManyRequests {
		t.Errorf("without TrustProxy, another X-Forwarded-For from the same peer: %d, want 429 (the header is not believed)", got)
	}
}

func signInStatus(t *testing.T, base string, header http.Header) int {
	t.Helper()
	return signIn(t, base, "guess", "/", header).StatusCode
}

func TestClientAddr(t *testing.T) {
	trusted := &Server{cfg: Config{TrustProxy: true}}
	direct := &Server{}
	for _, c := range []struct {
		desc   string
		s      *Server
		peer   string
		header http.Header
		want   string
	}{
		{"the peer", direct, "192.0.2.1:5000", nil, "192.0.2.1"},
		{"the peer, X-Forwarded-For not believed", direct, "192.0.2.1:5000", http.Header{"X-Forwarded-For": {"203.0.113.1"}}, "192.0.2.1"},
		{"the peer, X-Real-IP not believed", direct, "192.0.2.1:5000", http.Header{"X-Real-IP": {"203.0.113.1"}}, "192.0.2.1"},
		{"behind a proxy, no header: the proxy", trusted, "10.0.0.2:5000", nil, "10.0.0.2"},
		{"the right-most hop", trusted, "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"198.51.100.7, 203.0.113.1"}}, "203.0.113.1"},
		{"the right-most hop over several lines", trusted, "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"198.51.100.7", "203.0.113.1"}}, "203.0.113.1"},
		{"the proxy's own hop and loopback skipped", trusted, "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"203.0.113.1, 10.0.0.2, 127.0.0.1"}}, "203.0.113.1"},
		{"a hop with a port", trusted, "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"203.0.113.1:443"}}, "203.0.113.1"},
		{"garbage right-most: the peer, not what is left of it", trusted, "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"203.0.113.1, nonsense"}}, "10.0.0.2"},
		{"X-Real-IP without X-Forwarded-For", trusted, "10.0.0.2:5000", http.Header{"X-Real-IP": {"203.0.113.9"}}, "203.0.113.9"},
		{"an IPv6 client counts as its /64", trusted, "10.0.0.2:5000", http.Header{"X-Forwarded-For": {"2001:db8:1:2:aaaa::1"}}, "2001:db8:1:2::/64"},
		{"an IPv6 peer with a port", direct, "[2001:db8:1:2::5]:5000", nil, "2001:db8:1:2::/64"},
	} {
		r := httptest.NewRequest(http.MethodPost, "/login", nil)
		r.RemoteAddr = c.peer
		for k, v := range c.header {
			r.Header[http.CanonicalHeaderKey(k)] = v
		}
		if got := c.s.clientAddr(r); got != c.want {
			t.Errorf("%s: %q, want %q", c.desc, got, c.want)
		}
	}
}

func TestTheLimiterRefillsOverTime(t *testing.T) {
	l := newLoginLimiter(2, time.Second, 1)
	t0 := time.Unix(1000, 0)
	for i, want := range []struct {
		ok    bool
		delay time.Duration
	}{{true, 0}, {true, 0}, {true, time.Second}, {false, 0}} {
		if ok, delay, _ := l.take("a", t0); ok != want.ok || delay != want.delay {
			t.Errorf("attempt %d: %v after %v, want %v after %v", i, ok, delay, want.ok, want.delay)
		}
	}
	if ok, delay, _ := l.take("b", t0); !ok || delay != 0 {
		t.Error("another address shares the first's bucket")
	}
	if ok, _, wait := l.take("a", t0.Add(500*time.Millisecond)); ok || wait != 500*time.Millisecond {
		t.Errorf("half a second later, with one waiting: %v, wait %v, want refused for 500ms", ok, wait)
	}
	if ok, delay, _ := l.take("a", t0.Add(1100*time.Millisecond)); !ok || delay != 900*time.Millisecond {
		t.Errorf("1.1 s later: %v after %v, want a turn after 900ms", ok, delay)
	}
	l.refund("a")
	if ok, delay, _ := l.take("a", t0.Add(1100*time.Millisecond)); !ok || delay != 900*time.Millisecond {
		t.Errorf("after a refund: %v after %v, want the refunded turn after 900ms", ok, delay)
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
	const every = 300 * time.Millisecond
	hs := st.dashboardPacing(t, Config{Token: "sekrit"}, every)
	bearer := func(token string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+"/api/tenants", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		return do(t, req)
	}
	// A right token costs nothing: many calls in a row all pass at once.
	start := time.Now()
	for i := range 3 * loginBurst {
		if got := bearer("sekrit").StatusCode; got != http.StatusOK {
			t.Fatalf("call %d with the token: %d", i, got)
		}
	}
	if d := time.Since(start); d > every*loginBurst {
		t.Errorf("%d calls with the token took %v: they waited turns", 3*loginBurst, d)
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	start = time.Now()
	for range 60 {
		wg.Go(func() {
			code := bearer("guess").StatusCode
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	most := loginBurst + loginQueue + int(time.Since(start)/every) + 1
	if codes[http.StatusUnauthorized] > most || codes[http.StatusTooManyRequests] == 0 {
		t.Errorf("60 wrong bearer tokens at once: %v, want at most %d compared and the rest 429", codes, most)
	}
}
