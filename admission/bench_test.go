package admission_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/admitq/admitq/admission"
	"github.com/admitq/admitq/internal/redistest"
)

// BenchmarkAdmit measures decisions against a real redis-server, with group
// commit on and off, spread over 1000 tenants whose quota is large enough
// that most requests are admitted (every one is a real script decision).
func BenchmarkAdmit(b *testing.B) {
	srv := redistest.Start(b)
	q := admission.Quota{Limit: 1 << 30, Window: time.Second}
	for _, v := range []struct {
		name string
		opts []admission.Option
	}{
		{"batched", nil},
		{"unbatched", []admission.Option{admission.WithBatching(false)}},
	} {
		for _, parallel := range []int{1, 64} {
			b.Run(v.name+"/tenants=1000/parallel="+strconv.Itoa(parallel), func(b *testing.B) {
				rdb := srv.Client(b)
				g := admission.New(rdb, static(q), append([]admission.Option{admission.WithTimeout(5 * time.Second)}, v.opts...)...)
				defer g.Close()
				var n atomic.Int64
				b.SetParallelism(parallel) // goroutines per GOMAXPROCS
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						tenant := "t" + strconv.Itoa(int(n.Add(1)%1000))
						if _, err := g.Admit(b.Context(), tenant); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}
