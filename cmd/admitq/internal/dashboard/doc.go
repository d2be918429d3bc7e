// Package dashboard is the web app of admitq dashboard: a live page of every
// tenant's window and rates, quota editing, pause and resume of tenants and
// concurrency keys, and asynqmon under /asynq/.
//
//	srv, err := dashboard.New(dashboard.Config{
//		Redis:   rdb,
//		Asynq:   redisConnOpt,
//		Sources: []dashboard.Source{dashboard.Scrape("http://127.0.0.1:9464/metrics", nil)},
//	})
//	defer srv.Close()
//	http.ListenAndServe("127.0.0.1:8080", srv)
//
// # Where the numbers come from
//
// A tenant's window (in window, reserved ahead, next free slot) is read
// from Redis with admission.Gate.Usage, one script call per row shown, and
// only for the rows on the page. Decisions per second and tasks started
// per second are not in Redis: producers and workers count them in their
// Prometheus metrics (package metrics), and the dashboard samples those
// every two seconds from the Sources. They cost Redis nothing.
//
// # Live updates
//
// The page polls a JSON endpoint every two seconds rather than holding a
// server-sent event stream: each tab shows its own search and page, so the
// server would compute one view per tab either way; a poll is skipped while
// the tab is hidden, costs nothing once the tab is closed, needs no
// goroutine per viewer and passes any proxy.
//
// # Which tenants are listed
//
// Every tenant with a quota of its own, and the tenants on the default that
// were active recently: those whose window is in Redis (found with
// admission.Gate.ScanTenants, as admitq status finds them, at most every
// 30 seconds) and those the metrics counted within the charts' history.
// Rates are each source's increase divided by the time since its last
// successful read.
//
// # Concurrency keys
//
// The keys page (/keys) shows, per dispatched queue, the keys the
// dispatcher lists there (dispatch.QueueStats.Keys, at most
// dispatch.StatsKeys a queue, read with the tenants' dispatch state at most
// once a second): tasks in flight against the key's cap, tasks waiting,
// and whether the key's quota pauses them or a downstream throttle holds
// them. Below are the key quotas (RedisQuotas.ListKeys). A key's page
// (/keys/KEY) has Pause and Resume, which set the Paused of its quota and
// keep its cap, as admitq key pause and resume do, under the same checks
// as every other write.
//
// # Access
//
// Without a token the dashboard answers only requests whose Host is a
// loopback name (against DNS rebinding); the command binds it to loopback.
// With a token every page and write needs it: a client sends
// "Authorization: Bearer TOKEN", or signs in through a form, which sets an
// HttpOnly, SameSite=Strict cookie holding a random session ID. The server
// keeps the sessions: one ends at sign-out or after SessionTTL, whatever
// the browser keeps. Sign-in attempts are limited per client address (a
// burst of 5, then one every 2 seconds; a right token costs nothing), with
// 429 and Retry-After past that. Cookies are Secure when the request came
// over TLS, or through a proxy that says so in X-Forwarded-Proto when
// Config.TrustProxy is set.
//
// Forms carry a CSRF token checked against a SameSite cookie, are read
// only as application/x-www-form-urlencoded of at most 64 KB (multipart is
// refused with 415), and cross-origin writes are refused
// (net/http.CrossOriginProtection). Other bodies are bounded at 1 MB. Every
// response, asynqmon's included, carries Content-Security-Policy:
// frame-ancestors 'none' and X-Frame-Options: DENY, so no other site can
// frame a page and click in it. The page to go to after sign-in must be a
// path on this host: no scheme, host, backslash or control character,
// encoded or not.
package dashboard
