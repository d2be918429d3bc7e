package bench

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// BenchmarkDecisionCap measures what MaxInFlight costs Redis per decision:
// one unbatched decision at a time over 1000 tenants with a quota of 100
// per second, with no cap (admit.lua) and with a cap no tenant reaches
// (permit.lua, every decision taking a permit). script-µs/decision is the
// time Redis spent in the script calls (INFO commandstats), the least
// disturbed by other load on the machine.
func BenchmarkDecisionCap(b *testing.B) {
	for _, c := range []struct {
		name string
		cap  int
	}{{"cap=none", 0}, {"cap=set", 1 << 30}} {
		b.Run(c.name, func(b *testing.B) {
			srv := redistest.Start(b)
			admin := srv.Client(b)
			rdb := benchClient(b, srv, 1)
			q := admission.Quota{Limit: 100, Window: time.Second, MaxInFlight: c.cap}
			g := admission.New(rdb, admission.StaticQuotas{Default: &q}, admission.WithBatching(false), admission.WithDenyCache(false), admission.WithTimeout(5*time.Second))
			b.Cleanup(func() { g.Close() })
			ctx := context.Background()
			names := make([]string, 1000)
			for i := range names {
				names[i] = "t" + strconv.Itoa(i)
				if _, err := g.Admit(ctx, names[i]); err != nil { // load the script, make the keys
					b.Fatal(err)
				}
			}
			before, err := readStats(ctx, admin)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				if _, err := g.Admit(ctx, names[i%len(names)]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after, err := readStats(ctx, admin)
			if err != nil {
				b.Fatal(err)
			}
			calls, usec := scriptDelta(before, after)
			b.ReportMetric(float64(usec)/float64(b.N), "script-µs/decision")
			b.ReportMetric(float64(calls)/float64(b.N), "script-calls/decision")
			b.ReportMetric((after.cpu-before.cpu)*1e6/float64(b.N), "redis-cpu-µs/decision")
			// The commands the scripts ran: what the cost is made of,
			// whatever the load on the machine.
			var inner int64
			for name, st := range after.cmds {
				if !slices.Contains(scriptCommands, name) && name != "info" {
					inner += st.calls - before.cmds[name].calls
				}
			}
			b.ReportMetric(float64(inner)/float64(b.N), "commands/decision")
		})
	}
}
