package main

import (
	"fmt"
	"math/rand/v2"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// The matching backlog's prices, in thousandths of the instrument's
// reference price: resting orders rest 1 to maxRestPermille away from it on
// their side, crossing ones are priced crossPermille through it, past every
// resting order of the other side. Trades are at the resting orders'
// prices, so the last price (the band's center from the first trade on)
// stays within maxRestPermille of the reference, and every price stays far
// inside the seeded 10 % band around it.
const (
	maxRestPermille = 10
	crossPermille   = 20
)

// matchOrder is one order of the matching backlog: crossing when it is
// priced through the other side's resting orders (an immediate-or-cancel
// taker), resting otherwise (a good-til-canceled order away from the
// reference, which no other resting order crosses).
type matchOrder struct {
	cmd      orders.PlaceCommand
	crossing bool
}

// matchBacklog generates n orders over instruments from accounts, the same
// ones for the same seed. Order i goes to instrument i mod len(instruments);
// on each instrument, its orders alternate resting and crossing, and go in
// pairs of sides (resting buy, crossing buy, resting sell, crossing sell),
// so half are crossing and each side rests and takes as much as the other.
// Accounts are drawn at random. A resting order is one to three base
// quantities and a crossing one two, so the crossing orders take about what
// rests; the base quantity is the least number of lots worth three times
// the instrument's minimum notional at its reference price. Every order is
// checked against its instrument's rules and band before it is returned.
func matchBacklog(instruments []orders.Instrument, accounts []string, n int, prefix string, seed uint64) ([]matchOrder, error) {
	if len(instruments) == 0 || len(accounts) == 0 {
		return nil, fmt.Errorf("matching backlog: %d instruments and %d accounts, want at least one of each", len(instruments), len(accounts))
	}
	rng := rand.New(rand.NewPCG(seed, 0x6d61746368))
	bases := make([]decimal.Decimal, len(instruments))
	for i, in := range instruments {
		base, err := baseQuantity(in)
		if err != nil {
			return nil, err
		}
		bases[i] = base
	}
	backlog := make([]matchOrder, n)
	for i := range n {
		in, base := instruments[i%len(instruments)], bases[i%len(instruments)]
		k := i / len(instruments)
		crossing := k%2 == 1
		side := orders.Buy
		if (k/2)%2 == 1 {
			side = orders.Sell
		}
		cmd := orders.PlaceCommand{
			Account:       accounts[rng.IntN(len(accounts))],
			ClientOrderID: fmt.Sprintf("%s-%d", prefix, i),
			Symbol:        in.Symbol,
			Side:          side,
			Type:          orders.Limit,
		}
		permille, lots := int64(1+rng.IntN(maxRestPermille)), int64(1+rng.IntN(3))
		if crossing {
			permille, lots = -crossPermille, 2
			cmd.TimeInForce = orders.IOC
		}
		var err error
		if cmd.Price, err = priceAway(in, side, permille); err != nil {
			return nil, err
		}
		if cmd.Quantity, err = base.Mul(decimal.MustNew(lots, 0)); err != nil {
			return nil, err
		}
		if refused := in.Check(cmd); len(refused) > 0 {
			return nil, fmt.Errorf("matching backlog: order %d on %s refused: %v", i, in.Symbol, refused)
		}
		if ok, err := in.InBand(cmd.Price); err != nil || !ok {
			return nil, fmt.Errorf("matching backlog: order %d on %s: price %s outside the band (%v)", i, in.Symbol, cmd.Price, err)
		}
		backlog[i] = matchOrder{cmd: cmd, crossing: crossing}
	}
	return backlog, nil
}

// priceAway is the price permille thousandths of the reference away from it
// on side's resting side (below for a buy, above for a sell; a negative
// permille goes through to the other side), on the tick grid, rounded away
// from the reference.
func priceAway(in orders.Instrument, side orders.Side, permille int64) (decimal.Decimal, error) {
	thousand := int64(1000)
	factor := thousand - permille
	if side == orders.Sell {
		factor = thousand + permille
	}
	price, err := in.Reference().Mul(decimal.MustNew(factor, 3))
	if err != nil {
		return decimal.Decimal{}, err
	}
	ticks, err := price.Quo(in.TickSize)
	if err != nil {
		return decimal.Decimal{}, err
	}
	// Away from the reference: down below it, up above it.
	if factor < thousand {
		ticks = ticks.Floor(0)
	} else {
		ticks = ticks.Ceil(0)
	}
	return ticks.Mul(in.TickSize)
}

// baseQuantity is the least whole number of lots worth three times the
// instrument's minimum notional at its reference price.
func baseQuantity(in orders.Instrument) (decimal.Decimal, error) {
	lotValue, err := in.LotSize.Mul(in.Reference())
	if err != nil {
		return decimal.Decimal{}, err
	}
	want, err := in.MinNotional.Mul(decimal.MustNew(3, 0))
	if err != nil {
		return decimal.Decimal{}, err
	}
	lots, err := want.Quo(lotValue)
	if err != nil {
		return decimal.Decimal{}, err
	}
	return lots.Ceil(0).Mul(in.LotSize)
}
