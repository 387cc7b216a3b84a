package main

import (
	"math"
	"math/bits"
	"time"
)

// histogram is a log-linear (HDR-style) latency histogram: exact below 64 ns,
// then 64 linear sub-buckets per power of two, so any quantile it reports is
// within 1/64 (1.6%) above the true value. It is not safe for concurrent use:
// each goroutine records into its own and the results are merged.
type histogram struct {
	counts [(64 - subBits + 1) * subCount]int64
	total  int64
	max    int64
}

const (
	subBits  = 6
	subCount = 1 << subBits
)

func bucketOf(v int64) int {
	if v < subCount {
		return int(max(v, 0))
	}
	shift := bits.Len64(uint64(v)) - subBits - 1
	return (shift+1)*subCount + int(v>>shift) - subCount
}

// bucketTop is the largest value that falls into bucket i.
func bucketTop(i int) int64 {
	if i < subCount {
		return int64(i)
	}
	shift := i/subCount - 1
	sub := int64(i%subCount + subCount)
	return (sub+1)<<shift - 1
}

func (h *histogram) record(d time.Duration) {
	v := int64(d)
	h.counts[bucketOf(v)]++
	h.total++
	h.max = max(h.max, v)
}

func (h *histogram) merge(other *histogram) {
	for i, n := range other.counts {
		h.counts[i] += n
	}
	h.total += other.total
	h.max = max(h.max, other.max)
}

// quantile is the value at or below which a fraction q of the samples lie
// (rounded up to its bucket's top, never above the largest sample).
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.total)))
	rank = min(max(rank, 1), h.total)
	var seen int64
	for i, n := range h.counts {
		seen += n
		if seen >= rank {
			return time.Duration(min(bucketTop(i), h.max))
		}
	}
	return time.Duration(h.max)
}
