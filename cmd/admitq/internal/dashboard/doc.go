// Package dashboard is the web app of admitq dashboard: a live page of every
// tenant's window and rates, quota editing, and asynqmon under /asynq/.
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
// # Access
//
// Without a token the dashboard answers only requests whose Host is a
// loopback name (against DNS rebinding); the command binds it to loopback.
// With a token every page and write needs it: a sign-in form sets an
// HttpOnly, SameSite=Strict cookie derived from the token (never the token
// itself), or a client sends "Authorization: Bearer TOKEN". Forms carry a
// CSRF token checked against a SameSite cookie, and cross-origin writes are
// refused (net/http.CrossOriginProtection).
package dashboard
