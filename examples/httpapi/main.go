// Command httpapi is an HTTP front end that takes jobs for tenants and
// enqueues them through admitq. A tenant within its quota gets 202 Accepted,
// with the job admitted now or deferred to its slot; a tenant over it gets
// 429 Too Many Requests with a Retry-After header.
//
//	POST /tenants/{tenant}/jobs
//	{"type": "email:send", "payload": {"to": "ann@example.com"}}
//
// See README.md. Run a worker (../worker) to process the jobs.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/enqueue"
	"github.com/admitq/admitq/examples/internal/redisaddr"
	"github.com/admitq/admitq/metrics"
)

func main() {
	redis.SetLogger(redisaddr.QuietLog{})
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg, err := parseFlags(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		os.Exit(2) // the error and the usage are printed already
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, log); err != nil {
		fmt.Fprintln(os.Stderr, "httpapi:", err)
		os.Exit(1)
	}
}

type config struct {
	redis string
	addr  string
	quota admission.Quota
}

// parseFlags reads the command line, with defaults from the environment.
// Errors and usage go to stderr.
func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("httpapi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	redisaddr.Var(fs, &cfg.redis)
	fs.StringVar(&cfg.addr, "addr", envOr(getenv, "ADMITQ_HTTP", defaultAddr), "address to listen on (env ADMITQ_HTTP); it serves /metrics too")
	fs.IntVar(&cfg.quota.Limit, "limit", 10, "jobs a tenant may start in any window, when Redis holds no quota for it (admitq quota set)")
	fs.DurationVar(&cfg.quota.Window, "window", time.Second, "length of the sliding window, when Redis holds no quota for the tenant")
	fs.DurationVar(&cfg.quota.MaxDelay, "max-delay", 5*time.Second, "how far ahead a job may be deferred before it is refused, when Redis holds no quota for the tenant")
	fail := func(err error) (config, error) {
		fmt.Fprintln(fs.Output(), "httpapi:", err)
		return config{}, err
	}
	// The flag package's own errors get the program's prefix too.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(out, "httpapi:", err)
		}
		fs.Usage()
		return config{}, err
	}
	if cfg.redis, err = redisaddr.Resolve(fs, cfg.redis, getenv); err != nil {
		return fail(err)
	}
	if err := cfg.quota.Validate(); err != nil {
		return fail(err)
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	return cfg, nil
}

// defaultAddr is where the API listens by default: not 8080, where
// admitq dashboard does.
const defaultAddr = "127.0.0.1:8090"

// quotas reads each tenant's quota from Redis, so that admitq quota set
// (and the dashboard) apply here as they do to every producer; a tenant
// with none there, and no default there either, gets the flags' quota.
type quotas struct {
	redis *admission.RedisQuotas
	flags admission.Quota
}

func (q quotas) Quota(ctx context.Context, tenant string) (admission.Quota, error) {
	got, err := q.redis.Quota(ctx, tenant)
	if errors.Is(err, admission.ErrNoQuota) {
		return q.flags, nil
	}
	return got, err
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// Server timeouts. A job request is small and answered within the gate's
// timeout (250 ms), so a client that takes longer than readTimeout to send
// one is broken or hostile; without these, it holds a connection and a
// goroutine for as long as it likes.
const (
	readHeaderTimeout = 5 * time.Second  // the request line and headers
	readTimeout       = 10 * time.Second // the whole request, body included
	writeTimeout      = 15 * time.Second // from the end of the headers to the end of the answer
	idleTimeout       = 15 * time.Second // a keep-alive connection between requests
)

// newServer returns the HTTP server for h on addr.
func newServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
	}
}

// run checks that Redis answers, then serves the API until ctx is done, and
// shuts down gracefully.
func run(ctx context.Context, cfg config, log *slog.Logger) error {
	opts, err := redisaddr.Options(cfg.redis)
	if err != nil {
		return err
	}
	// Without this check a wrong address would show only as a 503 for
	// every request.
	if err := redisaddr.Ping(ctx, opts); err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	gate := admission.New(rdb, quotas{redis: admission.NewRedisQuotas(rdb), flags: cfg.quota})
	defer gate.Close()
	client := enqueue.NewFromRedis(rdb, gate)

	// Decisions per tenant and outcome, for admitq dashboard --metrics.
	m := metrics.New()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	h := routes(newAPI(client, asynq.NewInspectorFromRedisClient(rdb), m, log),
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), cfg.addr)

	// Listen first, so that "listening" is said only once it is true.
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	srv := newServer(cfg.addr, h)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("httpapi listening", "addr", ln.Addr().String(), "redis", opts.Addr, "quota_without_one_in_redis", cfg.quota.String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// maxBody bounds a request body.
const maxBody = 1 << 20

// queue is the asynq queue the jobs go to.
const queue = "default"

// newHandler returns the API, enqueueing through client, looking up jobs
// whose Idempotency-Key is taken with insp, and logging failures other than
// the caller's to log.
func newHandler(client *enqueue.Client, insp *asynq.Inspector, log *slog.Logger) http.Handler {
	return newAPI(client, insp, nil, log)
}

// newAPI is newHandler counting each decision in m; nil counts none.
func newAPI(client *enqueue.Client, insp *asynq.Inspector, m *metrics.Metrics, log *slog.Logger) http.Handler {
	a := &api{client: client, insp: insp, metrics: m, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tenants/{tenant}/jobs", a.createJob)
	return rejectCrossSite(rejectUncleanPaths(mux))
}

// routes is all the server answers, the API and /metrics, behind
// checkHost for the host of listenAddr.
func routes(api, metrics http.Handler, listenAddr string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.Handle("/", api)
	host, _, err := net.SplitHostPort(listenAddr)
	if err != nil {
		host = ""
	}
	return checkHost(host, mux)
}

// checkHost answers 421 Misdirected Request to a request whose Host is a
// name other than a loopback one (localhost, *.localhost) or listenHost.
// A web page whose own name an attacker points at 127.0.0.1 (DNS
// rebinding) then cannot read /metrics, which names tenants, nor post
// jobs: the browser sends the attacker's name as Host. An IP address as
// Host is always allowed, since no DNS answer can make a page's origin an
// IP address. A program reached through another name, behind a proxy,
// say, listens on that name with -addr.
func checkHost(listenHost string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowedHost(r.Host, listenHost) {
			writeJSON(w, http.StatusMisdirectedRequest, errorResponse{Error: "this server does not answer for that Host"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// allowedHost reports whether a request's Host (host or host:port) is
// one checkHost lets through.
func allowedHost(hostport, listenHost string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	switch {
	case host == "":
		return false
	case net.ParseIP(host) != nil:
		return true
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		return true
	}
	return listenHost != "" && host == strings.TrimSuffix(strings.ToLower(listenHost), ".")
}

// rejectCrossSite refuses a write that a web page on another site could
// have sent from a browser: 403 for an Origin other than the server's own
// or a Sec-Fetch-Site of cross-site, and 415 for a POST whose body is not
// declared application/json. A form or a simple fetch from another site
// can send only text/plain, form or multipart bodies without asking
// first; a JSON body takes a CORS preflight, which this server never
// answers. Reads (GET, HEAD) pass.
func rejectCrossSite(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
			writeJSON(w, http.StatusForbidden, errorResponse{Error: "cross-site requests are refused"})
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r.Host) {
			writeJSON(w, http.StatusForbidden, errorResponse{Error: fmt.Sprintf("requests from origin %q are refused", origin)})
			return
		}
		if r.Method == http.MethodPost {
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if err != nil || mt != "application/json" {
				writeJSON(w, http.StatusUnsupportedMediaType, errorResponse{Error: "Content-Type must be application/json"})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin reports whether origin (scheme://host[:port], or "null") is
// the server's own, reached at host.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

// rejectUncleanPaths answers 400 for a path with an empty, "." or ".."
// segment, such as /tenants//jobs. http.ServeMux would redirect it to the
// cleaned path (/tenants/jobs), which is no answer for an API client.
func rejectUncleanPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.EscapedPath()
		if p != "/" && (strings.Contains(p, "//") || slices.ContainsFunc(strings.Split(p, "/"), func(s string) bool { return s == "." || s == ".." })) {
			msg := fmt.Sprintf("path %q has an empty, . or .. segment", p)
			if p == "/tenants//jobs" {
				msg = "invalid tenant: empty"
			}
			writeJSON(w, http.StatusBadRequest, errorResponse{Error: msg})
			return
		}
		next.ServeHTTP(w, r)
	})
}

type api struct {
	client  *enqueue.Client
	insp    *asynq.Inspector
	metrics *metrics.Metrics // nil counts nothing
	log     *slog.Logger
}

// jobRequest is the body of POST /tenants/{tenant}/jobs.
type jobRequest struct {
	// Type is the asynq task type, for the worker's mux; required.
	Type string `json:"type"`
	// Payload is handed to the worker as is; optional.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// jobResponse is the body of a 202.
type jobResponse struct {
	ID    string    `json:"id"`
	State string    `json:"state"` // "admitted", "deferred" or "parked" (behind the tenant's in-flight cap)
	RunAt time.Time `json:"run_at"`
}

// errorResponse is the body of every other answer.
type errorResponse struct {
	Error      string     `json:"error"`
	RetryAfter int        `json:"retry_after,omitempty"` // seconds, as in the Retry-After header
	RetryAt    *time.Time `json:"retry_at,omitempty"`
}

func (a *api) createJob(w http.ResponseWriter, r *http.Request) {
	tenant := r.PathValue("tenant")
	if err := admission.ValidateTenant(tenant); err != nil {
		writeJSON(w, http.StatusBadRequest, errorResponse{Error: err.Error()})
		return
	}
	req, err := decodeJob(w, r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorResponse{Error: err.Error()})
		return
	}
	var opts []asynq.Option
	// A client that retries with the same Idempotency-Key gets the same job
	// and takes no second slot.
	if key, ok := r.Header["Idempotency-Key"]; ok {
		if len(key) != 1 || strings.TrimSpace(key[0]) == "" {
			writeJSON(w, http.StatusBadRequest, errorResponse{Error: "Idempotency-Key must be one non-empty value"})
			return
		}
		if err := checkIdempotencyKey(key[0]); err != nil {
			writeJSON(w, http.StatusBadRequest, errorResponse{Error: err.Error()})
			return
		}
		opts = append(opts, asynq.TaskID(jobID(tenant, key[0])))
	}

	task := asynq.NewTask(req.Type, req.Payload)
	info, d, err := a.client.Enqueue(r.Context(), tenant, task, append(opts, asynq.Queue(queue))...)
	var rej *enqueue.RejectedError
	if a.metrics != nil && (err == nil || errors.As(err, &rej)) {
		a.metrics.ObserveDecision(d)
	}
	switch {
	case err == nil:
		writeJSON(w, http.StatusAccepted, jobResponse{ID: info.ID, State: d.Outcome.String(), RunAt: d.At.UTC()})
	case errors.Is(err, asynq.ErrTaskIDConflict):
		a.existingJob(w, task, d)
	case errors.As(err, &rej):
		secs := retryAfterSeconds(rej.RetryAfter())
		at := rej.Decision.At.UTC()
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeJSON(w, http.StatusTooManyRequests, errorResponse{
			Error:      fmt.Sprintf("tenant %q is over its quota", tenant),
			RetryAfter: secs,
			RetryAt:    &at,
		})
	case errors.Is(err, admission.ErrNoQuota):
		writeJSON(w, http.StatusForbidden, errorResponse{Error: fmt.Sprintf("tenant %q has no quota", tenant)})
	case errors.Is(err, admission.ErrUnavailable):
		a.log.Warn("httpapi: redis unavailable", "tenant", tenant, "err", err)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, errorResponse{Error: "try again shortly", RetryAfter: 1})
	case r.Context().Err() != nil:
		// The client went away; nobody reads the answer.
	case errors.Is(err, enqueue.ErrOutOfMemory):
		a.log.Warn("httpapi: redis is out of memory", "tenant", tenant, "err", err)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, errorResponse{Error: "not accepted: the queue's storage is full; try again shortly", RetryAfter: 1})
	case enqueue.IsAmbiguous(err):
		// The write may have reached Redis: the job may be queued, holding
		// its slot. Only a retry under the same task ID can tell, and
		// without an Idempotency-Key the retry gets a new one.
		a.log.Warn("httpapi: enqueue failed, the job may be queued", "tenant", tenant, "id", d.ID, "err", err)
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusServiceUnavailable, errorResponse{Error: ambiguousMessage, RetryAfter: 1})
	default:
		a.log.Error("httpapi: enqueue failed", "tenant", tenant, "err", err)
		writeJSON(w, http.StatusInternalServerError, errorResponse{Error: "internal error"})
	}
}

// ambiguousMessage is the error of a 503 after which the job may have been
// accepted (enqueue.IsAmbiguous).
const ambiguousMessage = "the job may have been accepted: retry only with the same Idempotency-Key, " +
	"which finds the job if it was; a retry without one may run the job twice"

// existingJob answers a request whose Idempotency-Key names a job that is
// in the queue already (asynq.ErrTaskIDConflict), d being this request's
// decision:
//
//   - 422 when that job's type or payload differ from this request's: the
//     key was reused for another job;
//   - 202, as the first time, when the job holds the slot this request
//     holds: a retry of the job (d.Existing), or the original request whose
//     own retry, running at the same time, wrote the job first (both have
//     the one slot, which the job carries in its enqueue.SlotHeader);
//   - 409 otherwise: the job no longer holds a slot (it ran and was kept,
//     say), and the key cannot be used again yet.
func (a *api) existingJob(w http.ResponseWriter, task *asynq.Task, d admission.Decision) {
	info, err := a.insp.GetTaskInfo(queue, d.ID)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound):
		// Gone since the conflict (deleted, or done and not kept).
		writeJSON(w, http.StatusConflict, errorResponse{Error: "a job with this Idempotency-Key existed a moment ago; try again"})
		return
	case err != nil:
		a.log.Error("httpapi: looking up a job", "id", d.ID, "err", err)
		writeJSON(w, http.StatusInternalServerError, errorResponse{Error: "internal error"})
		return
	}
	if info.Type != task.Type() || !bytes.Equal(info.Payload, task.Payload()) {
		writeJSON(w, http.StatusUnprocessableEntity, errorResponse{
			Error: "this Idempotency-Key was used for another job, with a different type or payload",
		})
		return
	}
	if d.Existing || info.Headers[enqueue.SlotHeader] == strconv.FormatInt(d.At.UnixMilli(), 10) {
		writeJSON(w, http.StatusAccepted, jobResponse{ID: d.ID, State: d.Outcome.String(), RunAt: d.At.UTC()})
		return
	}
	writeJSON(w, http.StatusConflict, errorResponse{Error: "a job with this Idempotency-Key already exists"})
}

// maxIdempotencyKey bounds an Idempotency-Key: it becomes a task ID and a
// gate entry, kept in Redis for as long as the job.
const maxIdempotencyKey = 200

// checkIdempotencyKey allows at most maxIdempotencyKey bytes of printable
// ASCII, as the IETF draft's keys (a UUID, an order number) are.
func checkIdempotencyKey(k string) error {
	if len(k) > maxIdempotencyKey {
		return fmt.Errorf("Idempotency-Key is %d bytes, want at most %d", len(k), maxIdempotencyKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return fmt.Errorf("Idempotency-Key holds byte 0x%02x at %d, want printable ASCII", k[i], i)
		}
	}
	return nil
}

// jobID turns a tenant's idempotency key into a task ID. asynq task IDs are
// global, while each tenant picks its keys, so the ID carries the tenant;
// the length prefix keeps ("a:b", "c") and ("a", "b:c") apart.
func jobID(tenant, key string) string {
	return strconv.Itoa(len(tenant)) + ":" + tenant + ":" + key
}

// decodeJob reads and checks the request body.
func decodeJob(w http.ResponseWriter, r *http.Request) (jobRequest, error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	var req jobRequest
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, io.EOF) {
			return jobRequest{}, errors.New("empty body, want a JSON object with a type")
		}
		return jobRequest{}, fmt.Errorf("invalid JSON body: %w", err)
	}
	if dec.More() {
		return jobRequest{}, errors.New("invalid JSON body: more than one value")
	}
	if strings.TrimSpace(req.Type) == "" {
		return jobRequest{}, errors.New(`"type" is required`)
	}
	if len(req.Payload) > 0 {
		// Compact, so that a retry that only spaces its JSON differently
		// is the same job (see existingJob).
		var b bytes.Buffer
		if err := json.Compact(&b, req.Payload); err != nil {
			return jobRequest{}, fmt.Errorf("invalid JSON payload: %w", err)
		}
		req.Payload = b.Bytes()
	}
	return req, nil
}

// retryAfterSeconds turns d into a Retry-After value: whole seconds,
// rounded up, and at least 1, since 0 would invite an immediate retry.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
