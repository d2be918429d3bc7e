package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	sessionCookie = "admitq_session"
	csrfCookie    = "admitq_csrf"
	csrfField     = "csrf"

	// SessionTTL is how long a sign-in lasts. The server forgets the
	// session then, whatever the browser keeps.
	SessionTTL = 12 * time.Hour
	// maxSessions bounds the sessions kept; past it the oldest goes.
	maxSessions = 10000

	// maxFormBytes bounds a form's body: a quota form is a few hundred
	// bytes.
	maxFormBytes = 64 << 10
	// maxBodyBytes bounds any other request's body (asynqmon's JSON
	// calls).
	maxBodyBytes = 1 << 20

	// Sign-in attempts per client address: a burst of loginBurst, then
	// one every loginEvery, with at most loginQueue waiting their turn.
	loginBurst = 5
	loginEvery = 2 * time.Second
	loginQueue = 3
	// maxLoginClients bounds the addresses remembered; past it, new ones
	// share one bucket, so that many addresses cannot grow the map.
	maxLoginClients = 10000
)

func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// sessions holds the signed-in sessions: random IDs, each with its expiry.
// The cookie is the ID alone, so it proves nothing once the server
// forgets it (at logout or expiry).
type sessions struct {
	mu  sync.Mutex
	ttl time.Duration
	m   map[string]time.Time // ID -> expiry
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, m: map[string]time.Time{}}
}

// create returns a new session's ID and expiry.
func (ss *sessions) create(now time.Time) (string, time.Time) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	exp := now.Add(ss.ttl)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k, e := range ss.m {
		if !now.Before(e) {
			delete(ss.m, k)
		}
	}
	if len(ss.m) >= maxSessions {
		var oldest string
		var at time.Time
		for k, e := range ss.m {
			if oldest == "" || e.Before(at) {
				oldest, at = k, e
			}
		}
		delete(ss.m, oldest)
	}
	ss.m[id] = exp
	return id, exp
}

// valid reports whether id is a live session.
func (ss *sessions) valid(id string, now time.Time) bool {
	if len(id) != 64 {
		return false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	exp, ok := ss.m[id]
	if ok && !now.Before(exp) {
		delete(ss.m, id)
		return false
	}
	return ok
}

func (ss *sessions) end(id string) {
	ss.mu.Lock()
	delete(ss.m, id)
	ss.mu.Unlock()
}

// loginLimiter is a token bucket per client address for sign-in attempts,
// as Redis's own AUTH has none and a token can be guessed offline only if
// it is short: this makes guessing online slow. Past its burst an address
// does not lose its attempts, it waits for them: each is compared in its
// turn, one per every, so that the right token still gets in (late) while
// guesses stay at that pace. Only when queue attempts are already waiting
// is one refused without being compared.
type loginLimiter struct {
	mu      sync.Mutex
	burst   float64
	every   time.Duration
	queue   float64
	buckets map[string]*bucket
}

// bucket is an address's attempts: below zero, tokens counts the
// attempts waiting their turn.
type bucket struct {
	tokens float64
	at     time.Time
}

func newLoginLimiter(burst int, every time.Duration, queue int) *loginLimiter {
	return &loginLimiter{burst: float64(burst), every: every, queue: float64(queue), buckets: map[string]*bucket{}}
}

// take reserves one attempt of client's, to be made after delay (0 within
// the burst). When queue attempts are already waiting it reserves nothing,
// ok is false, and wait is how long until one could be.
func (l *loginLimiter) take(client string, now time.Time) (ok bool, delay, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[client]
	if b == nil {
		if len(l.buckets) >= maxLoginClients {
			for k, v := range l.buckets {
				if l.refill(v, now) >= l.burst {
					delete(l.buckets, k)
				}
			}
		}
		if len(l.buckets) >= maxLoginClients {
			client = "(others)"
			b = l.buckets[client]
		}
		if b == nil {
			b = &bucket{tokens: l.burst, at: now}
			l.buckets[client] = b
		}
	}
	b.tokens, b.at = l.refill(b, now), now
	if b.tokens-1 < -l.queue {
		return false, 0, l.after(1 - l.queue - b.tokens)
	}
	b.tokens--
	return true, l.after(-b.tokens), 0
}

// after is how long n attempts take to come back (0 for n <= 0).
func (l *loginLimiter) after(n float64) time.Duration {
	if n <= 0 {
		return 0
	}
	return time.Duration(n * float64(l.every))
}

// refund gives back an attempt: a right token costs nothing, so that
// people who sign in often are not locked out.
func (l *loginLimiter) refund(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.buckets[client]; b != nil {
		b.tokens = math.Min(l.burst, b.tokens+1)
	}
}

func (l *loginLimiter) refill(b *bucket, now time.Time) float64 {
	return math.Min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.every))
}

// clientAddr is the address sign-in attempts are counted against. Without
// Config.TrustProxy it is the TCP peer's IP: X-Forwarded-For is not read,
// since any client can send one. With it, the peer is a proxy, so it is
// the right-most address in X-Forwarded-For that is not the proxy's own
// or loopback (the hop the proxy saw; the ones left of it are whatever
// the client wrote), else X-Real-IP, else the peer. An IPv6 address counts
// as its /64, which one host usually holds whole.
func (s *Server) clientAddr(r *http.Request) string {
	peer := r.RemoteAddr
	if h, _, err := net.SplitHostPort(peer); err == nil {
		peer = h
	}
	peerIP := net.ParseIP(peer)
	if peerIP == nil {
		return peer
	}
	if s.cfg.TrustProxy {
		if ip := forwardedFor(r.Header, peerIP); ip != nil {
			return addrKey(ip)
		}
		if ip := parseHop(r.Header.Get("X-Real-IP")); ip != nil {
			return addrKey(ip)
		}
	}
	return addrKey(peerIP)
}

// forwardedFor returns the right-most hop of X-Forwarded-For (all its
// lines, in order) that is neither the proxy nor loopback, or nil. A hop
// that is not an IP stops the walk: what is left of it cannot be trusted.
func forwardedFor(h http.Header, proxy net.IP) net.IP {
	var hops []string
	for _, v := range h.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		ip := parseHop(hops[i])
		if ip == nil {
			return nil
		}
		if !ip.Equal(proxy) && !ip.IsLoopback() {
			return ip
		}
	}
	return nil
}

// parseHop reads one address of X-Forwarded-For or X-Real-IP: an IP,
// perhaps with a port ("192.0.2.1:443", "[2001:db8::1]:443").
func parseHop(s string) net.IP {
	s = strings.TrimSpace(s)
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	return net.ParseIP(strings.Trim(s, "[]"))
}

func addrKey(ip net.IP) string {
	if ip4 := ip.To4(); ip4 != nil {
		return ip4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// checkToken compares given with the token in client's turn (see
// loginLimiter), in constant time. It returns retry > 0, without
// comparing, when the client already has loginQueue attempts waiting; ok
// false when the token is wrong or r ended while waiting.
func (s *Server) checkToken(r *http.Request, client, given string) (ok bool, retry time.Duration) {
	ok, delay, retry := s.logins.take(client, time.Now())
	if !ok {
		return false, retry
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return false, 0
		}
	}
	if !equal(given, s.cfg.Token) {
		return false, 0
	}
	s.logins.refund(client)
	return true, 0
}

// secure reports whether r came over TLS: to this server, or to a proxy
// the operator trusts (Config.TrustProxy) that says so in
// X-Forwarded-Proto.
func (s *Server) secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	return s.cfg.TrustProxy && strings.EqualFold(strings.TrimSpace(strings.Split(r.Header.Get("X-Forwarded-Proto"), ",")[0]), "https")
}

// authorized reports whether r carries the token, as a bearer header, or
// a live session's cookie. With no token set everyone is. A bearer header
// is a guess like a sign-in, so it takes its turn like one (checkToken);
// wait is not 0 when the client's turns are all taken.
func (s *Server) authorized(r *http.Request) (ok bool, wait time.Duration) {
	if s.cfg.Token == "" {
		return true, 0
	}
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		return s.checkToken(r, s.clientAddr(r), strings.TrimPrefix(h, "Bearer "))
	}
	c, err := r.Cookie(sessionCookie)
	return err == nil && s.sessions.valid(c.Value, time.Now()), 0
}

// actor names who made a change, for the log: never the token itself.
func (s *Server) actor(r *http.Request) string {
	if s.cfg.Token != "" {
		return "token holder at " + r.RemoteAddr
	}
	return "loopback " + r.RemoteAddr
}

// loopbackHost reports whether a Host header names this machine. Without a
// token the dashboard answers only those, so that a page from elsewhere
// cannot reach it by pointing its own name at 127.0.0.1 (DNS rebinding).
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// csrfToken returns the request's CSRF token, setting a new cookie when
// it has none.
func (s *Server) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 64 {
		return c.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	v := hex.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{
		Name: csrfCookie, Value: v, Path: "/", HttpOnly: true, Secure: s.secure(r), SameSite: http.SameSiteStrictMode,
	})
	return v
}

// csrfOK checks a form's CSRF field against its cookie. Call parseForm
// first.
func csrfOK(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return false
	}
	return equal(r.PostForm.Get(csrfField), c.Value)
}

// writable checks what every form that writes needs beyond guard's checks
// (the token, the loopback Host, cross-origin protection): a dashboard
// that is not read-only, a small URL-encoded form, and its CSRF token. It
// answers the request and returns false when one fails; the form is parsed
// when it returns true.
func (s *Server) writable(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.ReadOnly {
		http.Error(w, "this dashboard is read-only (--read-only)", http.StatusForbidden)
		return false
	}
	if status, err := parseForm(w, r); err != nil {
		http.Error(w, err.Error(), status)
		return false
	}
	if !csrfOK(r) {
		http.Error(w, "the form's CSRF token is missing or stale: reload the page and try again", http.StatusForbidden)
		return false
	}
	return true
}

// parseForm reads a URL-encoded form of at most maxFormBytes. Anything
// else (multipart above all, which net/http would spool to disk) is
// refused with the status to answer.
func parseForm(w http.ResponseWriter, r *http.Request) (int, error) {
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || ct != "application/x-www-form-urlencoded" {
		return http.StatusUnsupportedMediaType, fmt.Errorf("want a form sent as application/x-www-form-urlencoded, not %q", r.Header.Get("Content-Type"))
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		return http.StatusRequestEntityTooLarge, fmt.Errorf("the form is larger than %d bytes or malformed", maxFormBytes)
	}
	return 0, nil
}

// guard wraps every route: headers that refuse framing and sniffing, a
// bound on bodies, the loopback Host check without a token, the token
// check with one, and cross-origin protection for writes.
func (s *Server) guard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))
	checked := cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Token == "" && !loopbackHost(r.Host) {
			http.Error(w, "this dashboard has no token, so it answers only on a loopback address (localhost, 127.0.0.1, ::1)", http.StatusForbidden)
			return
		}
		open := r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/")
		if open {
			next.ServeHTTP(w, r)
			return
		}
		ok, wait := s.authorized(r)
		if wait > 0 {
			w.Header().Set("Retry-After", retryAfter(wait))
			http.Error(w, "too many attempts with a wrong token from your address: try again in "+retryAfter(wait)+" s", http.StatusTooManyRequests)
			return
		}
		if !ok {
			if r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/api/") && !strings.HasPrefix(r.URL.Path, "/asynq/api/") {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			http.Error(w, "sign in with the dashboard's token first", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// On every response, asynqmon's and errors included: a page of
		// another origin must not frame this one and click for the user.
		h := w.Header()
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
		}
		checked.ServeHTTP(w, r)
	})
}

// safeNext keeps a redirect after sign-in on this site: a path, with no
// scheme, host, backslash or control character, which browsers would read
// as another host ("/\t/evil" is "//evil" to them). Anything else is "/".
func safeNext(next string) string {
	if !localPath(next) {
		return "/"
	}
	// A percent-escaped form must be a local path too, for whatever
	// decodes it once more.
	if dec, err := url.PathUnescape(next); err != nil || !localPath(dec) {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
		return "/"
	}
	return next
}

func localPath(p string) bool {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return false
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f || c == '\\' || (c >= 0x80 && c < 0xa0) || c == '\u2028' || c == '\u2029' {
			return false
		}
	}
	return true
}

func retryAfter(d time.Duration) string {
	return strconv.Itoa(int(math.Ceil(d.Seconds())))
}
