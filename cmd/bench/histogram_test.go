package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsCoverValuesInOrder(t *testing.T) {
	for _, v := range []int64{0, 1, 63, 64, 65, 127, 128, 129, 1000, 1 << 20, 123456789, 1<<62 + 12345} {
		i := bucketOf(v)
		if top := bucketTop(i); top < v {
			t.Errorf("value %d: bucket %d tops at %d, below the value", v, i, top)
		}
		if i > 0 && bucketTop(i-1) >= v {
			t.Errorf("value %d: the bucket below (%d) already holds it", v, i-1)
		}
	}
}

func TestQuantilesWithinRelativeError(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var parts [4]histogram
	values := make([]int64, 100_000)
	for i := range values {
		values[i] = int64(rng.ExpFloat64() * float64(time.Millisecond))
		parts[i%4].record(time.Duration(values[i]))
	}
	var h histogram
	for i := range parts {
		h.merge(&parts[i])
	}
	slices.Sort(values)
	for _, q := range []float64{0.5, 0.99, 0.999, 1} {
		want := values[int(q*float64(len(values)))-1]
		got := int64(h.quantile(q))
		if got < want || float64(got-want) > float64(want)/float64(subCount) {
			t.Errorf("quantile %v = %d, want %d within 1/%d above", q, got, want, subCount)
		}
	}
	if h.total != int64(len(values)) {
		t.Errorf("total %d, want %d", h.total, len(values))
	}
}
