package main

import (
	"testing"
	"time"
)

// TestOrderTrackTimesDecisionsFromTheSchedule checks that an order is
// timed from its scheduled send to its first event only, that orders the
// gateway refused are left out, that accepted orders without an event are
// counted, and that another load's client order ids are not taken.
func TestOrderTrackTimesDecisionsFromTheSchedule(t *testing.T) {
	start := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	track := newOrderTrack("s0800", 4)
	for i := range 4 {
		track.sent(i, start.Add(time.Duration(i)*time.Millisecond), i != 2)
	}
	for _, c := range []struct {
		clientOrderID string
		want          int
		ok            bool
	}{
		{"s0800-0", 0, true}, {"s0800-3", 3, true}, {"s0800-4", 0, false}, {"s0800-x", 0, false},
		{"a0800-1", 0, false}, {"s08001-1", 0, false}, {track.clientOrderID(2), 2, true},
	} {
		if i, ok := track.index(c.clientOrderID); i != c.want || ok != c.ok {
			t.Errorf("index(%q) = %d, %v; want %d, %v", c.clientOrderID, i, ok, c.want, c.ok)
		}
	}
	// Order 0: accepted and settled, decided at 30 ms, appended at 25; a
	// later event of it does not count. Order 1: decided at 41 ms (40 after
	// its schedule). Order 2 was refused; order 3 has no event.
	track.orderEvent(0, start.Add(25*time.Millisecond), start.Add(30*time.Millisecond))
	track.orderEvent(0, start.Add(90*time.Millisecond), start.Add(99*time.Millisecond))
	track.orderEvent(1, start.Add(38*time.Millisecond), start.Add(41*time.Millisecond))
	track.orderEvent(2, start.Add(5*time.Millisecond), start.Add(6*time.Millisecond))
	toClient, toLog, missing := track.decided()
	if missing != 1 {
		t.Errorf("%d undecided, want 1 (order 3)", missing)
	}
	// The histogram rounds a value up to its bucket's top, within 1/64.
	near := func(got, want float64) bool { return got >= want && got <= want*(1+1.0/subCount) }
	client, log := summarize(&toClient), summarize(&toLog)
	if client.Samples != 2 || !near(client.P50Ms, 30) || !near(client.MaxMs, 40) {
		t.Errorf("to the client: %+v, want 2 samples, p50 30 ms, max 40 ms", client)
	}
	if log.Samples != 2 || !near(log.P50Ms, 25) || !near(log.MaxMs, 37) {
		t.Errorf("to the log: %+v, want 2 samples, p50 25 ms, max 37 ms", log)
	}
}

func TestSummarizeQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	got := summarize(&h)
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"p50", got.P50Ms, 500}, {"p90", got.P90Ms, 900}, {"p99", got.P99Ms, 990}, {"max", got.MaxMs, 1000}} {
		// The histogram rounds up to its bucket's top, within 1/64.
		if c.got < c.want || c.got > c.want*(1+1.0/subCount) {
			t.Errorf("%s %.3f ms, want %.0f ms within 1/%d above", c.name, c.got, c.want, subCount)
		}
	}
	if got.Samples != 1000 {
		t.Errorf("%d samples, want 1000", got.Samples)
	}
	if empty := summarize(&histogram{}); empty != (latency{}) {
		t.Errorf("empty histogram: %+v, want zeros", empty)
	}
}
