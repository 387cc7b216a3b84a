package main

import (
	"fmt"
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// seededInstruments are the instruments as the migrations seed them.
func seededInstruments() []orders.Instrument {
	in := func(symbol, base, quote, tick, lot, minNotional, reference string) orders.Instrument {
		return orders.Instrument{
			Symbol: symbol, Base: base, Quote: quote,
			TickSize: decimal.MustParse(tick), LotSize: decimal.MustParse(lot), MinNotional: decimal.MustParse(minNotional),
			ReferencePrice: decimal.MustParse(reference), PriceBandPercent: decimal.MustParse("10"),
			MakerFeeBps: decimal.MustParse("10"), TakerFeeBps: decimal.MustParse("20"),
		}
	}
	return []orders.Instrument{
		in("BTC-USD", "BTC", "USD", "0.01", "0.00001", "10", "50000.00"),
		in("ETH-USD", "ETH", "USD", "0.05", "0.001", "10", "3000.00"),
		in("ETH-BTC", "ETH", "BTC", "0.00001", "0.005", "0.0001", "0.06000"),
	}
}

// TestMatchBacklog checks the generated orders: on each instrument's grid,
// above its minimum notional, inside its band even once the last price has
// moved as far as a trade can move it, half of them crossing, and the
// resting ones never crossing each other while every crossing one is priced
// through the whole other side.
func TestMatchBacklog(t *testing.T) {
	all := seededInstruments()
	accounts := make([]string, 50)
	for i := range accounts {
		accounts[i] = fmt.Sprintf("ACC_%d", i)
	}
	for _, tt := range []struct {
		name        string
		instruments []orders.Instrument
		n           int
	}{
		{"hot", all[:1], 10000},
		{"spread", all, 10000},
		{"odd count", all, 101},
	} {
		t.Run(tt.name, func(t *testing.T) {
			backlog, err := matchBacklog(tt.instruments, accounts, tt.n, "m", 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(backlog) != tt.n {
				t.Fatalf("%d orders, want %d", len(backlog), tt.n)
			}
			type book struct {
				minRestBid, maxRestBid, minRestAsk, maxRestAsk decimal.Decimal
				minCrossBuy, maxCrossSell                      decimal.Decimal
				orders                                         int
			}
			books := map[string]*book{}
			used := map[string]bool{}
			crossing := 0
			for i, o := range backlog {
				cmd := o.cmd
				var in orders.Instrument
				for _, candidate := range tt.instruments {
					if candidate.Symbol == cmd.Symbol {
						in = candidate
					}
				}
				if in.Symbol == "" {
					t.Fatalf("order %d on %q, not one of the instruments", i, cmd.Symbol)
				}
				if refused := in.Check(cmd); len(refused) > 0 {
					t.Errorf("order %d (%s %s @ %s) refused: %v", i, cmd.Side, cmd.Quantity, cmd.Price, refused)
				}
				// Trades happen at resting prices, so the last price stays
				// within maxRestPermille of the reference: the order must be
				// in the band around either end of that range.
				for _, permille := range []int64{-maxRestPermille, 0, maxRestPermille} {
					moved := in
					moved.LastPrice = mustMul(t, in.ReferencePrice, decimal.MustNew(1000+permille, 3))
					if ok, err := moved.InBand(cmd.Price); err != nil || !ok {
						t.Errorf("order %d at %s outside %s's band with the last price at %s (%v)", i, cmd.Price, in.Symbol, moved.LastPrice, err)
					}
				}
				if o.crossing != (cmd.TimeInForce == orders.IOC) {
					t.Errorf("order %d: crossing %v with time in force %q", i, o.crossing, cmd.TimeInForce)
				}
				used[cmd.Account] = true
				b := books[cmd.Symbol]
				if b == nil {
					b = &book{}
					books[cmd.Symbol] = b
				}
				b.orders++
				less := func(a, b decimal.Decimal) bool { return a.Cmp(b) < 0 }
				keep := func(slot *decimal.Decimal, price decimal.Decimal, better func(a, b decimal.Decimal) bool) {
					if slot.IsZero() || better(price, *slot) {
						*slot = price
					}
				}
				greater := func(a, b decimal.Decimal) bool { return a.Cmp(b) > 0 }
				switch {
				case o.crossing && cmd.Side == orders.Buy:
					keep(&b.minCrossBuy, cmd.Price, less)
				case o.crossing:
					keep(&b.maxCrossSell, cmd.Price, greater)
				case cmd.Side == orders.Buy:
					keep(&b.minRestBid, cmd.Price, less)
					keep(&b.maxRestBid, cmd.Price, greater)
				default:
					keep(&b.minRestAsk, cmd.Price, less)
					keep(&b.maxRestAsk, cmd.Price, greater)
				}
				if o.crossing {
					crossing++
				}
			}
			if want := tt.n / 2; crossing < want-len(tt.instruments) || crossing > want+len(tt.instruments) {
				t.Errorf("%d of %d orders crossing, want about half", crossing, tt.n)
			}
			if len(books) != len(tt.instruments) {
				t.Errorf("orders on %d instruments, want %d", len(books), len(tt.instruments))
			}
			for symbol, b := range books {
				if b.orders < tt.n/len(tt.instruments) || b.orders > tt.n/len(tt.instruments)+1 {
					t.Errorf("%s: %d orders, want an even share of %d", symbol, b.orders, tt.n)
				}
				if b.maxRestBid.Cmp(b.minRestAsk) >= 0 {
					t.Errorf("%s: resting bid %s at or above resting ask %s", symbol, b.maxRestBid, b.minRestAsk)
				}
				if b.minCrossBuy.Cmp(b.maxRestAsk) < 0 {
					t.Errorf("%s: a crossing buy at %s is below resting asks up to %s", symbol, b.minCrossBuy, b.maxRestAsk)
				}
				if b.maxCrossSell.IsZero() && tt.n/len(tt.instruments) >= 4 {
					t.Errorf("%s: no crossing sell", symbol)
				}
				if !b.maxCrossSell.IsZero() && b.maxCrossSell.Cmp(b.minRestBid) > 0 {
					t.Errorf("%s: a crossing sell at %s is above resting bids down to %s", symbol, b.maxCrossSell, b.minRestBid)
				}
			}
			if tt.n >= 1000 && len(used) != len(accounts) {
				t.Errorf("%d of %d accounts placed orders", len(used), len(accounts))
			}
		})
	}
}

func mustMul(t *testing.T, a, b decimal.Decimal) decimal.Decimal {
	t.Helper()
	product, err := a.Mul(b)
	if err != nil {
		t.Fatal(err)
	}
	return product
}

// TestMatchBacklogIsSeeded checks that a seed gives the same backlog.
func TestMatchBacklogIsSeeded(t *testing.T) {
	accounts := []string{"ACC_A", "ACC_B", "ACC_C"}
	a, errA := matchBacklog(seededInstruments(), accounts, 300, "m", 7)
	b, errB := matchBacklog(seededInstruments(), accounts, 300, "m", 7)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	for i := range a {
		if a[i].cmd != b[i].cmd || a[i].crossing != b[i].crossing {
			t.Fatalf("order %d differs: %+v and %+v", i, a[i], b[i])
		}
	}
}
