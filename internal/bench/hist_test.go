package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestHistogramQuantilesWithin3Percent compares the histogram's quantiles
// with the exact ones of the same samples.
func TestHistogramQuantilesWithin3Percent(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h histogram
	var all []time.Duration
	for range 100_000 {
		// Log-uniform from 1µs to 100ms, like latencies.
		d := time.Duration(1e3 * math.Pow(10, r.Float64()*5))
		h.record(d)
		all = append(all, d)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := all[int(q*float64(len(all)))-1]
		got := h.quantile(q)
		if rel := float64(got-exact) / float64(exact); rel > 0.03 || rel < -0.03 {
			t.Errorf("q%.3f = %v, exact %v (%.1f%% off)", q, got, exact, 100*rel)
		}
	}
	if h.max != all[len(all)-1] {
		t.Errorf("max %v, want %v", h.max, all[len(all)-1])
	}
}

func TestHistogramBucketsAreContiguous(t *testing.T) {
	prev := -1
	for v := time.Duration(0); v < 1<<20; v++ {
		b := bucketOf(v)
		if b != prev && b != prev+1 {
			t.Fatalf("bucketOf(%d) = %d after %d", v, b, prev)
		}
		if mid := bucketMid(b); float64(mid-v) > 0.04*float64(v)+1 || float64(v-mid) > 0.04*float64(v)+1 {
			t.Fatalf("bucketMid(bucketOf(%d)) = %d", v, mid)
		}
		prev = b
	}
	if b := bucketOf(time.Hour * 1000); b != histBuckets-1 {
		t.Errorf("a huge value went to bucket %d, want the last, %d", b, histBuckets-1)
	}
}
