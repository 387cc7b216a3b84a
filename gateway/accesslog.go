package gateway

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Refused requests (answered 4xx) come in floods: a client retrying a
// revoked key, scanning for ids, or hammering past its limit. Each would
// cost an access log line, and a flood from one client ~14 GB of them an
// hour. So a client's refusals are logged sparsely: the first of each
// client address (limitAddress) in a second has its line, the others of
// that second are counted (access_log_refusals_unlogged_total) and
// summarized in one line, "refusals not logged", once the second is over.
// Answers that are not refusals are logged each, as before.

// refusalLogPeriod is how long after a client's logged refusal its others
// are counted rather than logged.
const refusalLogPeriod = time.Second

// maxRefusalClients bounds the clients whose refusals are followed at
// once; the refusals of further clients (a flood from very many
// addresses) are counted and summarized together, under client "*".
const maxRefusalClients = 10_000

// refusalLog decides which refusals are logged, and summarizes the others.
type refusalLog struct {
	// logger writes the summaries; unlogged counts the refusals left out.
	logger   *slog.Logger
	unlogged func()

	mu sync.Mutex
	// clients holds each client's period: when its logged refusal was, and
	// what came since without a line.
	clients map[string]*refusalPeriod
	// overflow counts the refusals of clients past maxRefusalClients.
	overflow refusalPeriod
	// sweeping is true while the loop that writes the summaries runs: it
	// stops once no client is followed.
	sweeping bool
}

type refusalPeriod struct {
	start time.Time
	// unlogged counts the period's refusals without a line, by status.
	unlogged map[int]int
}

func newRefusalLog(logger *slog.Logger, unlogged func()) *refusalLog {
	return &refusalLog{logger: logger, unlogged: unlogged, clients: map[string]*refusalPeriod{}}
}

// admit reports whether a refusal of client, answered status now, gets
// its access log line.
func (r *refusalLog) admit(client string, status int, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	period := r.clients[client]
	switch {
	case period == nil && len(r.clients) >= maxRefusalClients:
		period = &r.overflow
	case period == nil:
		r.clients[client] = &refusalPeriod{start: now}
		r.sweep()
		return true
	case now.Sub(period.start) >= refusalLogPeriod && len(period.unlogged) == 0:
		// A period that ended with nothing left out: a new one.
		period.start = now
		return true
	}
	if period.unlogged == nil {
		period.unlogged = map[int]int{}
	}
	period.unlogged[status]++
	r.unlogged()
	r.sweep()
	return false
}

// sweep starts the loop that writes the summaries, unless it runs; r.mu is
// held.
func (r *refusalLog) sweep() {
	if r.sweeping {
		return
	}
	r.sweeping = true
	go r.summarize()
}

// summarize writes, every period, a line for each client whose period
// ended with refusals left out, and forgets the clients whose period
// ended; it returns once no client is followed.
func (r *refusalLog) summarize() {
	ticker := time.NewTicker(refusalLogPeriod / 2)
	defer ticker.Stop()
	for range ticker.C {
		now := time.Now()
		type summary struct {
			client   string
			unlogged map[int]int
		}
		var summaries []summary
		r.mu.Lock()
		for client, period := range r.clients {
			if now.Sub(period.start) < refusalLogPeriod {
				continue
			}
			if len(period.unlogged) > 0 {
				summaries = append(summaries, summary{client, period.unlogged})
			}
			delete(r.clients, client)
		}
		if len(r.overflow.unlogged) > 0 {
			summaries = append(summaries, summary{"*", r.overflow.unlogged})
			r.overflow.unlogged = nil
		}
		done := len(r.clients) == 0
		if done {
			r.sweeping = false
		}
		r.mu.Unlock()
		for _, s := range summaries {
			total, statuses := 0, make([]slog.Attr, 0, len(s.unlogged))
			for status, n := range s.unlogged {
				total += n
				statuses = append(statuses, slog.Int(statusText(status), n))
			}
			r.logger.LogAttrs(context.Background(), slog.LevelInfo, "refusals not logged",
				slog.String("client", s.client), slog.Int("count", total),
				slog.Attr{Key: "statuses", Value: slog.GroupValue(statuses...)})
		}
		if done {
			return
		}
	}
}

// statusText is a status as a log attribute's key.
func statusText(status int) string {
	const digits = "0123456789"
	if status < 100 || status > 999 {
		return "other"
	}
	return string([]byte{digits[status/100], digits[status/10%10], digits[status%10]})
}
