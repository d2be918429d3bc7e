package worktime

import "time"

// Run is one task's run: its tenant, and when it started and ended.
type Run struct {
	Tenant     string
	Start, End time.Time
}

// Span returns the first start and the last end of runs; zero times for
// none.
func Span(runs []Run) (first, last time.Time) {
	for i, r := range runs {
		if i == 0 || r.Start.Before(first) {
			first = r.Start
		}
		if i == 0 || r.End.After(last) {
			last = r.End
		}
	}
	return first, last
}

// Used returns each tenant's worker time within [from, to).
func Used(runs []Run, from, to time.Time) map[string]time.Duration {
	used := map[string]time.Duration{}
	for _, r := range runs {
		s, e := r.Start, r.End
		if s.Before(from) {
			s = from
		}
		if e.After(to) {
			e = to
		}
		if e.After(s) {
			used[r.Tenant] += e.Sub(s)
		}
	}
	return used
}

// Contended returns the interval in which both a and b had tasks still to
// start: from the first start of any run to the earlier of a's and b's
// last starts. It is empty (to not after from) when either has no run.
func Contended(runs []Run, a, b string) (from, to time.Time) {
	from, _ = Span(runs)
	last := map[string]time.Time{}
	for _, r := range runs {
		if r.Start.After(last[r.Tenant]) {
			last[r.Tenant] = r.Start
		}
	}
	to = last[a]
	if last[b].Before(to) {
		to = last[b]
	}
	return from, to
}

// Ratio returns a's worker time over b's in the interval both had tasks to
// start (Contended), or 0 when b used none.
func Ratio(runs []Run, a, b string) float64 {
	from, to := Contended(runs, a, b)
	used := Used(runs, from, to)
	if used[b] == 0 {
		return 0
	}
	return float64(used[a]) / float64(used[b])
}
