package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
)

const (
	sessionCookie = "admitq_session"
	csrfCookie    = "admitq_csrf"
	csrfField     = "csrf"
)

// sessionValue is what the session cookie holds: an HMAC of the token, so
// that the cookie proves the token without being it.
func sessionValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("admitq dashboard session v1"))
	return hex.EncodeToString(m.Sum(nil))
}

func equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// authorized reports whether r carries the token, as a bearer header or a
// session cookie. With no token set everyone is.
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.Token == "" {
		return true
	}
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		return equal(strings.TrimPrefix(h, "Bearer "), s.cfg.Token)
	}
	c, err := r.Cookie(sessionCookie)
	return err == nil && equal(c.Value, s.session)
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
func csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 64 {
		return c.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	v := hex.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{
		Name: csrfCookie, Value: v, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	return v
}

// csrfOK checks a form's CSRF field against its cookie.
func csrfOK(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return false
	}
	return equal(r.PostFormValue(csrfField), c.Value)
}

// guard wraps every route: the loopback Host check without a token, the
// token check with one, and cross-origin protection for writes.
func (s *Server) guard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))
	return cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "same-origin")
		if s.cfg.Token == "" && !loopbackHost(r.Host) {
			http.Error(w, "this dashboard has no token, so it answers only on a loopback address (localhost, 127.0.0.1, ::1)", http.StatusForbidden)
			return
		}
		open := r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/")
		if !open && !s.authorized(r) {
			if r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/api/") && !strings.HasPrefix(r.URL.Path, "/asynq/api/") {
				http.Redirect(w, r, "/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			http.Error(w, "sign in with the dashboard's token first", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	}))
}
