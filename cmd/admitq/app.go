package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/lua"
)

// clusterEnv names a Redis Cluster's nodes, as --redis-cluster does, when
// no flag names a server.
const clusterEnv = "ADMITQ_REDIS_CLUSTER"

// Exit codes.
const (
	exitOK       = 0 // done; for enqueue: admitted or deferred
	exitFailure  = 1 // something failed: Redis, a file, a task
	exitUsage    = 2 // bad command line: flag, argument, tenant, quota
	exitRejected = 3 // enqueue: the gate rejected the task
)

// exitError carries an exit code. A nil err prints nothing.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func usageError(err error) error { return &exitError{code: exitUsage, err: err} }

func usageErrorf(format string, args ...any) error {
	return usageError(fmt.Errorf(format, args...))
}

// inputError marks errors that mean the user's input was wrong (a bad tenant
// or quota) as usage errors, and passes others through.
func inputError(err error) error {
	if errors.Is(err, admission.ErrInvalidTenant) || errors.Is(err, admission.ErrInvalidQuota) {
		return usageError(err)
	}
	return err
}

// readError marks an error of a read as a usage error when the tenant
// given was bad, and passes others through: a quota stored in Redis that
// does not decode is an error (exit 1), for nothing on the command line
// is wrong.
func readError(err error) error {
	if errors.Is(err, admission.ErrInvalidTenant) {
		return usageError(err)
	}
	return err
}

// app is one run of the command: its output and its global flags.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string

	redisURL     string
	redisCluster string
	tlsCA        string
	prefix       string
	timeout      time.Duration

	// started is set when a command's own code begins; cobra's errors
	// before that (unknown command or flag, wrong number of arguments) are
	// usage errors.
	started bool
}

// run is the whole program: main calls it, and so do the tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, getenv: os.Getenv}
	return a.run(ctx, args)
}

func (a *app) run(ctx context.Context, args []string) int {
	root := a.newRootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return a.exit(err, args)
}

// exit prints err as one line, without credentials, and returns its code.
func (a *app) exit(err error, args []string) int {
	if err == nil {
		return exitOK
	}
	code := exitFailure
	var ee *exitError
	switch {
	case errors.As(err, &ee):
		code = ee.code
		if ee.err == nil {
			return code
		}
	case !a.started:
		code = exitUsage
	case errors.Is(err, context.Canceled):
		code = 130 // interrupted, as a shell reports SIGINT
	}
	msg := strings.TrimPrefix(err.Error(), "admitq: ")
	if a.redisCluster == "" && movedReply(err) {
		// A node of a cluster that answered INFO without saying so (or
		// refused INFO): its first keyed command tells.
		msg = clusterNodeMessage(a.redisURLSource())
	}
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", "; ")), " ")
	// The library's errors start "admitq: " too; once is enough.
	msg = strings.ReplaceAll(msg, ": admitq: ", ": ")
	for _, s := range a.secrets(args) {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	fmt.Fprintf(a.stderr, "admitq: %s\n", msg)
	return code
}

// secrets are the passwords anywhere on the command line or in
// ADMITQ_REDIS or ADMITQ_REDIS_CLUSTER, whether or not they parsed.
func (a *app) secrets(args []string) []string {
	var out []string
	for _, s := range append(args, a.getenv("ADMITQ_REDIS"), a.getenv(clusterEnv)) {
		if strings.Contains(s, "@") {
			out = append(out, urlSecrets(s)...)
		}
	}
	return out
}

func (a *app) newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "admitq",
		Short: "Per-tenant admission control for asynq job queues",
		Long: `admitq keeps each tenant of an asynq queue within its quota: a task is
admitted now, deferred to the next free slot, parked until one of the
tenant's tasks finishes (a tenant capped by --max-in-flight), or rejected.

Redis: --redis URL (or ADMITQ_REDIS), redis://[user:password@]host:port[/db],
rediss:// for TLS, or plain host:port; or --redis-cluster (or
ADMITQ_REDIS_CLUSTER) for a Redis Cluster. admitq needs Redis 7 or newer.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			a.started = true
			if s := lua.AdmitStandIn(); s != "" {
				fmt.Fprintf(a.stderr, "admitq: this build carries %s in admit.lua's place: a floor for benchmarks, not a limiter\n", s)
			}
			if a.timeout <= 0 {
				return usageErrorf("--timeout %v: want more than 0", a.timeout)
			}
			if a.prefix == "" {
				return usageErrorf("--prefix is empty")
			}
			if strings.ContainsAny(a.prefix, "{}") {
				return usageErrorf("--prefix %q has a brace: the dispatcher's keys hash on their queue's {<queue>} tag, which a brace in the prefix would come before", a.prefix)
			}
			for _, name := range []string{"redis", "redis-cluster"} {
				// An empty value is a slip (an unset shell variable, say),
				// not a wish for the default server.
				if f := cmd.Flags().Lookup(name); f != nil && f.Changed && strings.TrimSpace(f.Value.String()) == "" {
					return usageErrorf("--%s is empty; give a server, or leave the flag out for %s", name, defaultRedisURL)
				}
			}
			if a.redisURL != "" && a.redisCluster != "" {
				return usageErrorf("--redis and --redis-cluster: give one")
			}
			// The environment's cluster counts when no flag names a server.
			if env := a.getenv(clusterEnv); env != "" && a.redisURL == "" && a.redisCluster == "" {
				if a.getenv("ADMITQ_REDIS") != "" {
					return usageErrorf("ADMITQ_REDIS and %s are both set: unset one, or give --redis or --redis-cluster", clusterEnv)
				}
				a.redisCluster = env
			}
			return nil
		},
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: true},
		Version:           version(),
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })

	pf := root.PersistentFlags()
	pf.StringVar(&a.redisURL, "redis", "", "Redis URL, redis://[user:password@]host:port[/db] or rediss://… for TLS, or host:port (env ADMITQ_REDIS; default "+defaultRedisURL+")")
	pf.StringVar(&a.redisCluster, "redis-cluster", "", "Redis Cluster nodes host:port,…, optionally led by redis[s]://[user:password@] (env "+clusterEnv+")")
	pf.StringVar(&a.tlsCA, "tls-ca", "", "PEM `file` of the CA that signed the server's certificate (rediss only)")
	pf.StringVar(&a.prefix, "prefix", "admitq", "prefix of admitq's Redis keys")
	pf.DurationVar(&a.timeout, "timeout", 2*time.Second, "deadline of each Redis call, and of connecting")

	root.AddCommand(
		a.newDemoCmd(),
		a.newQuotaCmd(),
		a.newKeyCmd(), // key.go
		a.newStatusCmd(),
		a.newEnqueueCmd(),
		a.newWorkerCmd(),
		a.newBenchCmd(),     // bench.go
		a.newDashboardCmd(), // dashboard.go
		a.newTaskCmd(),      // task.go
	)
	return root
}

// redisURLOrEnv is --redis, else ADMITQ_REDIS, else "".
func (a *app) redisURLOrEnv() string {
	raw, _ := a.redisURLSource()
	return raw
}

// redisURLSource is --redis, else ADMITQ_REDIS, else "", and the name of
// where it came from, for errors.
func (a *app) redisURLSource() (raw, source string) {
	if a.redisURL != "" {
		return a.redisURL, "--redis"
	}
	if v := a.getenv("ADMITQ_REDIS"); v != "" {
		return v, "ADMITQ_REDIS"
	}
	return "", "--redis"
}

// redisConfig reads the global flags; a bad value is a usage error.
func (a *app) redisConfig() (redisConfig, error) {
	raw, source := a.redisURLSource()
	if raw == "" {
		raw = defaultRedisURL
	}
	cfg, err := parseRedis(raw, source, a.redisCluster, a.tlsCA, a.timeout)
	if err != nil {
		return redisConfig{}, usageError(err)
	}
	return cfg, nil
}

// dial connects to Redis and checks that it answers.
func (a *app) dial(ctx context.Context) (redis.UniversalClient, redisConfig, error) {
	cfg, err := a.redisConfig()
	if err != nil {
		return nil, redisConfig{}, err
	}
	return a.dialConfig(ctx, cfg)
}

// dialConfig checks that the server(s) of cfg answer and that admitq can
// work with them (checkServer), then returns a client for them.
func (a *app) dialConfig(ctx context.Context, cfg redisConfig) (redis.UniversalClient, redisConfig, error) {
	if err := ping(ctx, cfg, a.timeout); err != nil {
		return nil, redisConfig{}, err
	}
	return cfg.client(), cfg, nil
}

// gateOptions are the admission options every command uses.
func (a *app) gateOptions() []admission.Option {
	return []admission.Option{admission.WithPrefix(a.prefix), admission.WithTimeout(a.timeout)}
}

// needSubcommand is the RunE of a command that only groups subcommands:
// without one, or with an unknown one, the command line is wrong.
func needSubcommand(cmd *cobra.Command, args []string) error {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	list := strings.Join(names, ", ")
	if len(args) > 0 {
		return usageErrorf("unknown command %q for %q; want one of %s", args[0], cmd.CommandPath(), list)
	}
	return usageErrorf("%s needs a command: %s (see %s --help)", commandName(cmd), list, cmd.CommandPath())
}

// commandName is cmd's path without the root's name, for messages that
// "admitq: " already starts.
func commandName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// noArgs is the Args of a command that takes no arguments: an extra one
// is named as such (cobra.NoArgs calls it an unknown command).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments; got %q (usage: %s)", commandName(cmd), args[0], cmd.UseLine())
	}
	return nil
}

// validateQueue refuses an asynq queue name that no worker could be told
// to read: empty, not UTF-8, or holding spaces or control characters (a
// worker's --queues and most configuration formats cannot carry them).
func validateQueue(flag, q string) error {
	switch {
	case q == "":
		return usageErrorf("%s is empty", flag)
	case !utf8.ValidString(q):
		return usageErrorf("%s %q: not valid UTF-8", flag, q)
	}
	for _, r := range q {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return usageErrorf("%s %q: a queue name holds no spaces or control characters", flag, q)
		}
	}
	return nil
}

// oneTenant is the Args of a command that takes one TENANT, and names it
// when it is missing.
func oneTenant(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return usageErrorf("%s: TENANT is missing (usage: %s)", commandName(cmd), cmd.UseLine())
	case len(args) > 1:
		return usageErrorf("%s: want one TENANT, got %d arguments (usage: %s)", commandName(cmd), len(args), cmd.UseLine())
	}
	return nil
}

// validateTenants checks tenant arguments before anything touches Redis.
func validateTenants(tenants ...string) error {
	for _, t := range tenants {
		if err := admission.ValidateTenant(t); err != nil {
			return usageError(err)
		}
	}
	return nil
}

// isTerminal reports whether w is a character device, such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// colorful reports whether to colour what goes to w.
func (a *app) colorful(w io.Writer) bool {
	return isTerminal(w) && a.getenv("NO_COLOR") == "" && a.getenv("TERM") != "dumb"
}
