package placement

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/orders"
)

// Instruments is an in-process copy of the instruments table, replaced whole
// on each refresh so readers never lock.
type Instruments struct {
	db      InstrumentReader
	current atomic.Pointer[map[string]orders.Instrument]
	// loads numbers the reads of the table as they begin; stored is the
	// number of the read current holds, under storing: a read that began
	// before the one stored is dropped, so a slow periodic refresh never
	// puts back a table older than a reread Fresh made.
	loads   atomic.Uint64
	storing sync.Mutex
	stored  uint64

	// stamps, when set, reads the table's stamp (TrackChanges); stamp is
	// the one read before the copy was loaded. renewing lets one request
	// at a time reread; failedStamp and failedAt hold off rereading after
	// one failed.
	stamps      StampReader
	stamp       atomic.Int64
	renewing    sync.Mutex
	failedStamp int64
	failedAt    time.Time
}

// rereadTimeout bounds Fresh's reread of the table, and rereadBackoff is
// how long it waits after a failed one before it tries the same stamp
// again: meanwhile the copy answers, and settlement, which reads the
// instruments itself, still refuses an order on a halted one.
const (
	rereadTimeout = time.Second
	rereadBackoff = time.Second
)

// InstrumentsStamp is the id of the instruments table's one stamp
// (coherence.StampKey): any change of an instrument (a halt, its band, its
// fees) raises it.
const InstrumentsStamp = "table"

// InstrumentReader reads the instruments table (postgres.ReadInstruments).
type InstrumentReader interface {
	ReadInstruments(ctx context.Context) (map[string]orders.Instrument, error)
}

// LoadInstruments reads the instruments table.
func LoadInstruments(ctx context.Context, db InstrumentReader) (*Instruments, error) {
	instruments := &Instruments{db: db}
	if err := instruments.Refresh(ctx); err != nil {
		return nil, err
	}
	return instruments, nil
}

// Refresh reads the table again.
func (s *Instruments) Refresh(ctx context.Context) error {
	load := s.loads.Add(1)
	loaded, err := s.db.ReadInstruments(ctx)
	if err != nil {
		return err
	}
	s.storing.Lock()
	defer s.storing.Unlock()
	if load > s.stored {
		s.current.Store(&loaded)
		s.stored = load
	}
	return nil
}

// TrackChanges makes Fresh reread the table when its stamp moved: read
// from the process's local copy (coherence's tracking mode), which Redis
// invalidates when the stamp is raised, it costs no round trip.
func (s *Instruments) TrackChanges(stamps StampReader) {
	s.stamps = stamps
	s.stamp.Store(-1) // loaded before any stamp was read
}

// Fresh rereads the table when a change was announced since the copy was
// loaded (TrackChanges; nothing without it). One request rereads at a
// time, for at most rereadTimeout; the others, and the requests within
// rereadBackoff of a failed reread, are answered by the copy as it is.
// While Redis does not answer the copy stays, refreshed every interval
// (KeepFresh). A failed reread is returned, and the copy stays too.
func (s *Instruments) Fresh(ctx context.Context) error {
	if s.stamps == nil {
		return nil
	}
	stamp, err := s.stamps.Stamp(ctx, InstrumentsTable, InstrumentsStamp)
	if err != nil || stamp == s.stamp.Load() {
		return nil
	}
	if !s.renewing.TryLock() {
		return nil
	}
	defer s.renewing.Unlock()
	if stamp == s.stamp.Load() || (stamp == s.failedStamp && time.Since(s.failedAt) < rereadBackoff) {
		return nil
	}
	// Not the request's own deadline: a client that hangs up must not
	// hold the reread off for everyone for rereadBackoff.
	rereadCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rereadTimeout)
	defer cancel()
	// The stamp was read before the table: a change after the read raises
	// it past what the copy is stored with.
	if err := s.Refresh(rereadCtx); err != nil {
		s.failedStamp, s.failedAt = stamp, time.Now()
		return err
	}
	s.stamp.Store(stamp)
	return nil
}

// Lookup returns the instrument with the symbol.
func (s *Instruments) Lookup(symbol string) (orders.Instrument, error) {
	in, found := (*s.current.Load())[symbol]
	if !found {
		return orders.Instrument{}, fmt.Errorf("%w: %s", orders.ErrUnknownInstrument, symbol)
	}
	return in, nil
}

// All returns every instrument, sorted by symbol.
func (s *Instruments) All() []orders.Instrument {
	current := *s.current.Load()
	all := make([]orders.Instrument, 0, len(current))
	for _, in := range current {
		all = append(all, in)
	}
	slices.SortFunc(all, func(a, b orders.Instrument) int { return strings.Compare(a.Symbol, b.Symbol) })
	return all
}

// Symbols returns every instrument's symbol, sorted.
func (s *Instruments) Symbols() []string {
	current := *s.current.Load()
	symbols := make([]string, 0, len(current))
	for symbol := range current {
		symbols = append(symbols, symbol)
	}
	slices.Sort(symbols)
	return symbols
}

// KeepFresh refreshes every interval until ctx ends, so a halt reaches the
// gateway within one interval; a failed refresh keeps the last good copy.
func (s *Instruments) KeepFresh(ctx context.Context, interval time.Duration, failed func(error)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
				failed(err)
			}
		}
	}
}

// InstrumentsTable names instruments in coherence.
const InstrumentsTable = "instruments"

// FollowBroadcasts rereads the instruments whenever a coherence broadcast says
// one changed. A burst of halts fills the bounded ring and the excess is
// dropped and counted; one reread covers them all.
func (s *Instruments) FollowBroadcasts(ctx context.Context, caches *coherence.Client, failed func(error), opts ...coherence.SubscribeOption) (*coherence.Subscription, error) {
	return caches.Subscribe(ctx, InstrumentsTable, 16, func(string) {
		if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
			failed(err)
		}
	}, opts...)
}
