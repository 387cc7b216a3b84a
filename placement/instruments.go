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
	// stamps, when set, reads the table's stamp (TrackChanges); stamp is
	// the one read before the copy was loaded, and renewing orders the
	// loads Fresh makes.
	stamps   StampReader
	stamp    atomic.Int64
	renewing sync.Mutex
}

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
	loaded, err := s.db.ReadInstruments(ctx)
	if err != nil {
		return err
	}
	s.current.Store(&loaded)
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
// loaded (TrackChanges; nothing without it). While Redis does not answer
// the copy stays, refreshed every interval (KeepFresh); a failed reread
// is returned and the copy stays too.
func (s *Instruments) Fresh(ctx context.Context) error {
	if s.stamps == nil {
		return nil
	}
	stamp, err := s.stamps.Stamp(ctx, InstrumentsTable, InstrumentsStamp)
	if err != nil || stamp == s.stamp.Load() {
		return nil
	}
	s.renewing.Lock()
	defer s.renewing.Unlock()
	if stamp == s.stamp.Load() {
		return nil
	}
	// The stamp was read before the table: a change after the read raises
	// it past what the copy is stored with.
	if err := s.Refresh(ctx); err != nil {
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
