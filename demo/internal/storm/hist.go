package storm

import (
	"math/bits"
	"time"
)

// hist is a latency histogram with log-linear buckets: exact below 128 ns,
// then 64 buckets per power of two, so a quantile is off by at most 1.6 %.
// The maximum is kept exactly.
type hist struct {
	counts []uint32
	n      int64
	max    time.Duration
}

const (
	subBits    = 6
	subBuckets = 1 << subBits
	maxShift   = 40 // up to 2^47 ns, a day and a half
	numBuckets = 2*subBuckets + maxShift*subBuckets
)

func bucketOf(d time.Duration) int {
	v := uint64(d)
	if d < 0 {
		v = 0
	}
	if v < 2*subBuckets {
		return int(v)
	}
	shift := bits.Len64(v) - subBits - 1
	if shift > maxShift {
		return numBuckets - 1
	}
	return shift*subBuckets + int(v>>uint(shift))
}

// valueOf is the middle of bucket i.
func valueOf(i int) time.Duration {
	if i < 2*subBuckets {
		return time.Duration(i)
	}
	shift := i/subBuckets - 1
	top := uint64(i%subBuckets + subBuckets)
	return time.Duration(top<<uint(shift) + (uint64(1)<<uint(shift))/2)
}

func (h *hist) add(d time.Duration) {
	if h.counts == nil {
		h.counts = make([]uint32, numBuckets)
	}
	h.counts[bucketOf(d)]++
	h.n++
	if d > h.max {
		h.max = d
	}
}

func (h *hist) merge(o *hist) {
	if o.n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]uint32, numBuckets)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	if o.max > h.max {
		h.max = o.max
	}
}

// quantile returns the q-quantile, 0 < q < 1; the maximum for q >= 1.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q >= 1 {
		return h.max
	}
	rank := int64(q*float64(h.n-1)) + 1 // 1-based rank of the sample
	var seen int64
	for i, c := range h.counts {
		seen += int64(c)
		if seen >= rank {
			if v := valueOf(i); v < h.max {
				return v
			}
			return h.max
		}
	}
	return h.max
}
