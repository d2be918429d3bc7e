package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/admitq/admitq/lua"
)

// Report is what Run measured. It marshals to JSON as it is; durations are
// in nanoseconds, rates per second.
type Report struct {
	Started     time.Time `json:"started"`
	Redis       Server    `json:"redis"`
	Host        Host      `json:"host"`
	Concurrency int       `json:"concurrency"`
	Tenants     int       `json:"tenants"`
	// Distribution is "uniform" or "zipf s=<exponent>".
	Distribution string    `json:"distribution"`
	Quota        QuotaInfo `json:"quota"`
	// Duration is each contender's measured time in all, in Rounds
	// slices, each after Warmup.
	Duration    time.Duration `json:"duration_ns"`
	Rounds      int           `json:"rounds"`
	Warmup      time.Duration `json:"warmup_ns"`
	FloodFactor int           `json:"flood_factor"`
	// Outcomes says which run the rows are (OutcomesEqual at the top,
	// OutcomesAtQuota in AtQuota); Quota.Limit is that run's.
	Outcomes string `json:"outcomes"`
	// Rows are the contenders in the order they ran.
	Rows []Row `json:"rows"`
	// Ratios compare each closed-loop row with the gate (batched). At the
	// top they come from the equal-outcome run, where they mean what they
	// say; in AtQuota they mix outcomes.
	Ratios []Ratio `json:"ratios"`
	// AtQuota is the run under the configured quota, with its own rows
	// and ratios (and the flood); nil within itself.
	AtQuota *Report `json:"at_quota,omitempty"`
	// Targets are admitq's performance targets, checked on this run: the
	// gate's ratios and Redis time on the equal-outcome rows, bytes per
	// entry and the flood on the at-quota ones.
	Targets []Target `json:"targets"`
	// Spread is how many tenants hash to each master, on a cluster.
	Spread []MasterTenants `json:"spread,omitempty"`
	// AdmitStandIn names the floor this build runs in admit.lua's place
	// (lua.AdmitStandIn), for every contender that admits through a gate
	// in Log mode; empty in a normal build.
	AdmitStandIn string `json:"admit_stand_in,omitempty"`
	// CounterStandIn names the floor this build runs in counter.lua's
	// place (lua.CounterStandIn); empty in a normal build.
	CounterStandIn string `json:"counter_stand_in,omitempty"`
}

// Server is the Redis the bench ran on.
type Server struct {
	Addr    string `json:"addr"`
	Version string `json:"version"`
	// Embedded reports a throwaway redis-server that Run started itself.
	Embedded bool `json:"embedded"`
	// Cluster reports a Redis Cluster; Addr then lists its seed nodes.
	Cluster bool `json:"cluster,omitempty"`
}

// Host is the machine the bench ran on. Redis and the callers share its
// CPUs when Redis is embedded.
type Host struct {
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"num_cpu"`
	GoVersion  string `json:"go_version"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
}

// QuotaInfo is the quota every contender enforced, per tenant.
type QuotaInfo struct {
	Limit    int           `json:"limit"`
	Window   time.Duration `json:"window_ns"`
	MaxDelay time.Duration `json:"max_delay_ns"`
}

// Row is one contender's measurement.
type Row struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Workload string `json:"workload"`
	// Seconds is how long the measurement ran.
	Seconds float64 `json:"seconds"`
	// Decisions counts the calls that returned a decision; Errors those
	// that failed, FirstError says how.
	Decisions  int64   `json:"decisions"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	PerSecond  float64 `json:"decisions_per_sec"`
	// Latencies of one decision as its caller saw it, to within 3%.
	P50  time.Duration `json:"p50_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	Max  time.Duration `json:"max_ns"`
	// Outcomes. Local counts decisions made without Redis, of any outcome.
	Admitted int64 `json:"admitted"`
	Deferred int64 `json:"deferred"`
	Rejected int64 `json:"rejected"`
	Local    int64 `json:"local"`
	// ScriptCallsPerDecision is the EVAL/EVALSHA calls Redis counted
	// (INFO commandstats) over Decisions; ScriptUsecPerCall is the time
	// Redis says it spent in each, inner commands included.
	ScriptCallsPerDecision float64 `json:"script_calls_per_decision"`
	ScriptUsecPerCall      float64 `json:"script_usec_per_call"`
	// ScriptUsecPerRecorded is the same time over the decisions that
	// recorded a slot (admitted or deferred): Redis's CPU per admitted
	// decision as INFO commandstats tells it. ZaddUsecPerRecorded is the
	// part of it spent in ZADD, the one command no log can do without.
	ScriptUsecPerRecorded float64 `json:"script_usec_per_recorded,omitempty"`
	ZaddUsecPerRecorded   float64 `json:"zadd_usec_per_recorded,omitempty"`
	// RedisCPUPerDecision is Redis's CPU time (INFO cpu, user+sys) over
	// Decisions, µs: scripts, commands and network I/O together.
	RedisCPUPerDecision float64 `json:"redis_cpu_usec_per_decision"`
	// ClientCPUPerDecision is the bench process's own CPU time (user+sys)
	// over Decisions, µs: the contender's client side (go-redis, batching,
	// asynq's encoding) and the bench's few nanoseconds of bookkeeping. 0
	// where the OS does not say.
	ClientCPUPerDecision float64 `json:"client_cpu_usec_per_decision"`
	// BytesPerEntry is MEMORY USAGE over ZCARD, summed over
	// LogKeysSampled tenants' logs right after the run; 0 for contenders
	// that keep no log.
	BytesPerEntry  float64 `json:"bytes_per_entry,omitempty"`
	LogKeysSampled int     `json:"log_keys_sampled,omitempty"`
	// Masters is each master's share of the run, on a cluster.
	Masters []MasterCPU `json:"masters,omitempty"`
	// RedisCeiling is the decisions/s at which Redis would spend a whole
	// core on this workload: Decisions over Redis's CPU seconds, the
	// busiest master's on a cluster. No client can take the contender
	// past it where Redis has a core of its own. 0 when unknown.
	RedisCeiling float64 `json:"redis_ceiling_per_sec,omitempty"`
}

// Ratio compares a row with the gate (batched), in the same run.
type Ratio struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Throughput is the gate's decisions/s over this row's.
	Throughput float64 `json:"gate_throughput_x"`
	// P99 is this row's p99 over the gate's.
	P99 float64 `json:"p99_x"`
	// ScriptCalls is this row's script calls per decision over the gate's;
	// 0 when either made none.
	ScriptCalls float64 `json:"script_calls_x"`
	// CPU is this row's CPU per decision, Redis's and the client's
	// together, over the gate's; 0 when unknown. On a machine where the
	// callers and Redis share the cores it predicts the throughput ratio,
	// and it is much less disturbed by other load on the machine.
	CPU float64 `json:"cpu_x"`
}

// Target is one of admitq's performance targets, checked on this run.
type Target struct {
	What string `json:"what"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
}

func newReport(cfg Config, addr, version string, embedded bool) Report {
	dist := "uniform"
	if cfg.Zipf > 1 {
		dist = fmt.Sprintf("zipf s=%g", cfg.Zipf)
	}
	return Report{
		Started:        time.Now().UTC(),
		Redis:          Server{Addr: addr, Version: version, Embedded: embedded},
		Host:           hostInfo(),
		Concurrency:    cfg.Concurrency,
		Tenants:        cfg.Tenants,
		Distribution:   dist,
		Quota:          QuotaInfo{Limit: cfg.Quota.Limit, Window: cfg.Quota.Window, MaxDelay: cfg.Quota.MaxDelay},
		AdmitStandIn:   lua.AdmitStandIn(),
		CounterStandIn: lua.CounterStandIn(),
		Duration:       cfg.Duration,
		Rounds:         cfg.Rounds,
		Warmup:         cfg.Warmup,
		FloodFactor:    cfg.FloodFactor,
		Rows:           []Row{},
	}
}

// Row returns the row of the contender id.
func (r *Report) Row(id string) (Row, bool) {
	for _, row := range r.Rows {
		if row.ID == id {
			return row, true
		}
	}
	return Row{}, false
}

// finish works out the ratios of both runs and the targets.
func (r *Report) finish() {
	r.ratios()
	at := r
	if r.AtQuota != nil {
		r.AtQuota.ratios()
		at = r.AtQuota
	}
	r.targets(at)
}

// ratios works out the ceilings and the ratios from the rows.
func (r *Report) ratios() {
	r.Ratios, r.Targets = []Ratio{}, []Target{}
	for i := range r.Rows {
		r.Rows[i].RedisCeiling = r.Rows[i].ceiling()
	}
	gate, ok := r.Row("gate-batched")
	if ok && gate.PerSecond > 0 {
		for _, row := range r.Rows {
			if row.ID == gate.ID || row.ID == "gate-flood" || row.PerSecond == 0 {
				continue
			}
			rt := Ratio{ID: row.ID, Name: row.Name, Throughput: gate.PerSecond / row.PerSecond}
			if gate.P99 > 0 {
				rt.P99 = float64(row.P99) / float64(gate.P99)
			}
			if gate.ScriptCallsPerDecision > 0 && row.ScriptCallsPerDecision > 0 {
				rt.ScriptCalls = row.ScriptCallsPerDecision / gate.ScriptCallsPerDecision
			}
			if g := gate.RedisCPUPerDecision + gate.ClientCPUPerDecision; g > 0 && gate.ClientCPUPerDecision > 0 {
				rt.CPU = (row.RedisCPUPerDecision + row.ClientCPUPerDecision) / g
			}
			r.Ratios = append(r.Ratios, rt)
		}
	}
}

// targets checks admitq's targets: the gate's on r's rows, bytes per entry
// and the flood on at's.
func (r *Report) targets(at *Report) {
	gate, ok := r.Row("gate-batched")
	faster := func(other string, want float64) {
		o, ok2 := r.Row(other)
		if !ok || !ok2 || o.PerSecond == 0 {
			return
		}
		x := gate.PerSecond / o.PerSecond
		r.Targets = append(r.Targets, Target{
			What: "gate (batched) decisions/s over " + o.Name,
			Want: fmt.Sprintf("≥ %.1f×", want), Got: fmt.Sprintf("%.2f×", x), Met: x >= want,
		})
	}
	faster("gate-unbatched", 2.5)
	if ctr, ok2 := r.Row("gate-counter"); ok && ok2 && gate.RedisCPUPerDecision > 0 && ctr.RedisCPUPerDecision > 0 {
		x := ctr.RedisCPUPerDecision / gate.RedisCPUPerDecision
		r.Targets = append(r.Targets, Target{
			What: "Counter mode's Redis CPU per admitted decision over Log mode's (INFO cpu)",
			Want: "≤ 0.8×", Got: fmt.Sprintf("%.2f×", x), Met: x <= 0.8,
		})
	}
	if rr, ok2 := r.Row("redis-rate"); ok && ok2 && rr.P99 > 0 {
		x := float64(gate.P99) / float64(rr.P99)
		r.Targets = append(r.Targets, Target{
			What: "gate (batched) p99 over go-redis/redis_rate's",
			Want: "≤ 0.5×", Got: fmt.Sprintf("%.2f× (%s vs %s)", x, fmtDur(gate.P99), fmtDur(rr.P99)), Met: x <= 0.5,
		})
	}
	if enq, ok1 := r.Row("enqueue"); ok1 {
		if bare, ok2 := r.Row("asynq"); ok2 && bare.PerSecond > 0 {
			x := enq.PerSecond / bare.PerSecond
			r.Targets = append(r.Targets, Target{
				What: "enqueue.Client.Enqueue decisions/s over bare asynq Enqueue",
				Want: "≥ 0.9×", Got: fmt.Sprintf("%.2f×", x), Met: x >= 0.9,
			})
		}
	}
	if ag, ok := at.Row("gate-batched"); ok && at.Quota.Limit <= 128 && ag.BytesPerEntry > 0 {
		gate := ag
		r.Targets = append(r.Targets, Target{
			What: "gate (batched) bytes per log entry (Limit ≤ 128, generated IDs)",
			Want: "≤ 32", Got: fmt.Sprintf("%.1f", gate.BytesPerEntry), Met: gate.BytesPerEntry <= 32,
		})
	}
	if fl, ok := at.Row("gate-flood"); ok && fl.Decisions > 0 {
		// At F× the quota one request in F is admitted, and the log must
		// record each: one call per admission is the floor (less when
		// admissions share a call). The deny cache answers the rest, but
		// for the few that race the call that refills the window.
		perAdmission := math.Inf(1)
		if fl.Admitted > 0 {
			perAdmission = fl.ScriptCallsPerDecision * float64(fl.Decisions) / float64(fl.Admitted)
		}
		r.Targets = append(r.Targets, Target{
			What: fmt.Sprintf("gate flood (1 tenant at %d× quota) script calls per admission", r.FloodFactor),
			Want: "≤ 1.05", Got: fmt.Sprintf("%.3f", perAdmission), Met: perAdmission <= 1.05,
		})
		reached := 0.0
		if fl.Rejected > 0 {
			reached = float64(fl.Rejected-fl.Local) / float64(fl.Rejected)
		}
		r.Targets = append(r.Targets, Target{
			What: "gate flood rejections that reach Redis",
			Want: "≤ 0.1%", Got: fmt.Sprintf("%.3f%% (%d of %d)", 100*reached, fl.Rejected-fl.Local, fl.Rejected), Met: reached <= 0.001,
		})
	}
}

// WriteText writes the report as aligned tables: the setup; for the
// equal-outcome run and then the at-quota run, one row per contender and
// the ratios against the gate; and the targets.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	where := r.Redis.Addr
	switch {
	case r.Redis.Embedded && r.Redis.Cluster:
		where = "embedded Redis Cluster of " + where
	case r.Redis.Cluster:
		where = "Redis Cluster " + where
	case r.Redis.Embedded:
		where = "embedded redis-server at " + where
	}
	fmt.Fprintf(&b, "redis %s (%s); %d CPUs, GOMAXPROCS %d, %s\n", r.Redis.Version, where, r.Host.NumCPU, r.Host.GOMAXPROCS, r.Host.GoVersion)
	q := fmt.Sprintf("a window of %v", r.Quota.Window)
	if r.Quota.MaxDelay > 0 {
		q += fmt.Sprintf(", max delay %v", r.Quota.MaxDelay)
	}
	fmt.Fprintf(&b, "%d callers, %d tenants (%s), quota per tenant: %s, the limit in each run's heading\n", r.Concurrency, r.Tenants, r.Distribution, q)
	if r.AdmitStandIn != "" {
		fmt.Fprintf(&b, "admit.lua replaced by %s: a floor, not a limiter\n", r.AdmitStandIn)
	}
	if r.CounterStandIn != "" {
		fmt.Fprintf(&b, "counter.lua replaced by %s: a floor, not a limiter\n", r.CounterStandIn)
	}
	if r.Rounds > 1 {
		fmt.Fprintf(&b, "%v measured per contender and run, round-robin in %d slices of %v, each after %v warmup on empty keys\n",
			r.Duration, r.Rounds, (r.Duration / time.Duration(r.Rounds)).Round(time.Millisecond), r.Warmup)
	} else {
		fmt.Fprintf(&b, "%v measured per contender and run, after %v warmup on empty keys\n", r.Duration, r.Warmup)
	}
	r.writeSection(&b)
	if r.AtQuota != nil && len(r.AtQuota.Rows) > 0 {
		r.AtQuota.writeSection(&b)
	}
	if len(r.Targets) > 0 {
		b.WriteString("\ntargets\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, t := range r.Targets {
			mark := "MET"
			if !t.Met {
				mark = "NOT MET"
			}
			fmt.Fprintf(tw, "  %s\t%s\twant %s\t%s\n", t.What, t.Got, t.Want, mark)
		}
		tw.Flush()
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeSection writes one run: its label and quota, its rows, Counter
// mode next to Log mode, the ceilings and the ratios against the gate.
func (r *Report) writeSection(b *strings.Builder) {
	delay := ""
	if r.Quota.MaxDelay > 0 {
		delay = fmt.Sprintf(", max delay %v", r.Quota.MaxDelay)
	}
	fmt.Fprintf(b, "\n== %s (limit %d per %v%s)\n", r.Outcomes, r.Quota.Limit, r.Quota.Window, delay)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "contender\tdecisions/s\tp50\tp99\tscript calls/dec\tscript µs/call\tredis CPU µs/dec\tclient CPU µs/dec\tB/entry\tadmit\tdefer\treject\tlocal\terrors\t")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n",
			row.Name, row.PerSecond, fmtDur(row.P50), fmtDur(row.P99),
			fmtRatio(row.ScriptCallsPerDecision), fmtOpt(row.ScriptUsecPerCall, "%.1f"), row.RedisCPUPerDecision,
			fmtOpt(row.ClientCPUPerDecision, "%.1f"),
			fmtOpt(row.BytesPerEntry, "%.1f"),
			pct(row.Admitted, row.Decisions), pct(row.Deferred, row.Decisions), pct(row.Rejected, row.Decisions), pct(row.Local, row.Decisions),
			row.Errors)
	}
	tw.Flush()
	for _, row := range r.Rows {
		if row.FirstError != "" {
			fmt.Fprintf(b, "%s: first error: %s\n", row.Name, row.FirstError)
		}
	}
	r.writeCounter(b)
	r.writeCeiling(b)
	r.writeCluster(b)
	if len(r.Ratios) > 0 {
		fmt.Fprintf(b, "\nagainst the gate (batched), %s (CPU: Redis's and the client's together)\n", strings.SplitN(r.Outcomes, ":", 2)[0])
		tw = tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "contender\tgate decisions/s ÷ its\tits p99 ÷ gate's\tits script calls ÷ gate's\tits CPU/dec ÷ gate's\t")
		for _, rt := range r.Ratios {
			fmt.Fprintf(tw, "%s\t%.2f×\t%.2f×\t%s\t%s\t\n", rt.Name, rt.Throughput, rt.P99, fmtX(rt.ScriptCalls), fmtX(rt.CPU))
		}
		tw.Flush()
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < 10*time.Microsecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func fmtX(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", v)
}

func fmtRatio(v float64) string {
	if v == 0 {
		return "0"
	}
	if v < 0.1 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func fmtOpt(v float64, format string) string {
	if v == 0 || math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func pct(n, of int64) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(of))
}
