package bench

import (
	"math/bits"
	"time"
)

// histogram counts latencies in log-linear buckets, in the manner of an HDR
// histogram: each power of two is split into 1<<subBits equal buckets, so a
// recorded value is known to within 1/32 (3%) from 1ns to over half an hour.
// One histogram belongs to one goroutine, so recording takes no lock and no
// atomic; histograms are merged after the goroutines end.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
	max    time.Duration
}

const (
	subBits     = 5
	histBuckets = (41 - subBits + 1) << subBits
)

func bucketOf(d time.Duration) int {
	v := uint64(max(d, 0))
	if v < 1<<subBits {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	i := (shift+1)<<subBits + int(v>>shift) - 1<<subBits
	return min(i, histBuckets-1)
}

// bucketMid returns the middle of bucket i, the value the histogram reports
// for anything recorded in it.
func bucketMid(i int) time.Duration {
	if i < 1<<subBits {
		return time.Duration(i)
	}
	shift := i>>subBits - 1
	lo := uint64(i&(1<<subBits-1)+1<<subBits) << shift
	return time.Duration(lo + (uint64(1)<<shift)/2)
}

func (h *histogram) record(d time.Duration) {
	h.counts[bucketOf(d)]++
	h.n++
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the value below which a fraction q of the recorded values
// lie, or 0 when nothing was recorded.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(bucketMid(i), h.max)
		}
	}
	return h.max
}
