package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A web page on another site cannot post jobs from a visitor's browser:
// a foreign Origin or Sec-Fetch-Site: cross-site is 403, and a body not
// declared JSON (all a form or a simple fetch can send without a CORS
// preflight) is 415. Requests that pass reach the handler, which answers
// 400 for the empty job here.
func TestCrossSiteWritesAreRefused(t *testing.T) {
	t.Parallel()
	h := newHandler(nil, nil, slog.New(slog.DiscardHandler))
	for _, c := range []struct {
		desc    string
		header  map[string]string
		want    int
		errHas  string
		noCType bool
	}{
		{desc: "a program: no Origin, JSON", want: http.StatusBadRequest},
		{desc: "JSON with a charset", header: map[string]string{"Content-Type": "application/json; charset=utf-8"}, want: http.StatusBadRequest},
		{desc: "the server's own origin", header: map[string]string{"Origin": "http://127.0.0.1:8090", "Sec-Fetch-Site": "same-origin"}, want: http.StatusBadRequest},
		{desc: "a foreign Origin", header: map[string]string{"Origin": "https://evil.example"}, want: http.StatusForbidden, errHas: "origin"},
		{desc: "Origin null (a sandboxed page)", header: map[string]string{"Origin": "null"}, want: http.StatusForbidden},
		{desc: "another port of the same host", header: map[string]string{"Origin": "http://127.0.0.1:8080"}, want: http.StatusForbidden},
		{desc: "Sec-Fetch-Site: cross-site", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, want: http.StatusForbidden, errHas: "cross-site"},
		{desc: "a form's body", header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, want: http.StatusUnsupportedMediaType, errHas: "application/json"},
		{desc: "text/plain", header: map[string]string{"Content-Type": "text/plain"}, want: http.StatusUnsupportedMediaType},
		{desc: "no Content-Type", noCType: true, want: http.StatusUnsupportedMediaType},
	} {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8090/tenants/acme/jobs", strings.NewReader(`{}`))
		if !c.noCType {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.want || !strings.Contains(rec.Body.String(), c.errHas) {
			t.Errorf("%s: %d %s, want %d with %q", c.desc, rec.Code, rec.Body, c.want, c.errHas)
		}
	}
}

// A page whose name an attacker points at 127.0.0.1 (DNS rebinding)
// reaches the server with its own name as Host: 421, for /metrics and the
// API alike. Loopback names, IP addresses and the name the server listens
// on pass.
func TestForeignHostsAreRefused(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := routes(ok, ok, "api.internal:8090")
	for _, c := range []struct {
		host string
		want int
	}{
		{"127.0.0.1:8090", http.StatusTeapot},
		{"localhost:8090", http.StatusTeapot},
		{"LOCALHOST.:8090", http.StatusTeapot},
		{"app.localhost:8090", http.StatusTeapot},
		{"[::1]:8090", http.StatusTeapot},
		{"10.0.0.5:8090", http.StatusTeapot},
		{"api.internal:8090", http.StatusTeapot},
		{"api.internal", http.StatusTeapot},
		{"evil.example:8090", http.StatusMisdirectedRequest},
		{"localhost.evil.example:8090", http.StatusMisdirectedRequest},
		{"api.internal.evil.example", http.StatusMisdirectedRequest},
		{"", http.StatusMisdirectedRequest},
	} {
		for _, path := range []string{"/metrics", "/tenants/acme/jobs"} {
			method := http.MethodGet
			if path != "/metrics" {
				method = http.MethodPost
			}
			req := httptest.NewRequest(method, "http://x"+path, nil)
			req.Host = c.host
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != c.want {
				t.Errorf("Host %q, %s %s: %d, want %d", c.host, method, path, rec.Code, c.want)
			}
		}
	}
	// Listening on every interface allows no name but loopback ones.
	h = routes(ok, ok, ":8090")
	req := httptest.NewRequest(http.MethodGet, "http://x/metrics", nil)
	req.Host = "evil.example:8090"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusMisdirectedRequest {
		t.Errorf("-addr :8090, Host evil.example: %d, want 421", rec.Code)
	}
}
