package orders_test

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/govalues/decimal"
	"pgregory.net/rapid"

	"github.com/ordergate/ordergate/orders"
)

// btcUSD is the instrument of the decision tests: its band around 100 is 90
// to 110, and the taker pays 20 bps where the maker pays 10.
var btcUSD = orders.Instrument{Symbol: "BTC-USD", Base: "BTC", Quote: "USD",
	TickSize: amt("0.01"), LotSize: amt("0.001"), ReferencePrice: amt("100"),
	MakerFeeBps: amt("10"), TakerFeeBps: amt("20"), PriceBandPercent: amt("10")}

// takerOrder is account T's order; price "" is a market order's none.
func takerOrder(side orders.Side, typ orders.OrderType, tif orders.TimeInForce, quantity, price string) orders.Order {
	o := orders.Order{ID: "ORD_T", ClientOrderID: "c-1", Account: "T", Symbol: btcUSD.Symbol, Side: side, Type: typ,
		TimeInForce: tif, Quantity: amt(quantity)}
	if price != "" {
		p := amt(price)
		o.Price = &p
	}
	return o
}

// restingHeld is a resting order of account M holding what it would on
// resting whole now: a sell its quantity, a buy at the taker rate.
func restingHeld(id string, side orders.Side, price, remaining string) orders.Resting {
	hold, err := orders.Hold(side, amt(remaining), amt(price), btcUSD.TakerFeeBps)
	if err != nil {
		panic(err)
	}
	return orders.Resting{OrderID: id, Account: "M", Price: amt(price), Remaining: amt(remaining), Hold: hold}
}

// describeDecision is a decision line by line, amounts trimmed, for tables.
func describeDecision(d orders.Decision) []string {
	trim := func(x decimal.Decimal) string { return x.Trim(0).String() }
	account := func(a string) string {
		if a == orders.VenueAccount {
			return "venue"
		}
		return a
	}
	lines := []string{fmt.Sprintf("%s %s%s%s tif %s", d.Status, d.RejectReason, d.CancelReason, d.DuplicateOf, d.TimeInForce)}
	if d.Hold.IsPos() {
		lines = append(lines, fmt.Sprintf("hold %s %s", trim(d.Hold), d.HoldAsset))
	}
	for _, t := range d.Trades {
		lines = append(lines, fmt.Sprintf("trade %s %s at %s: notional %s, fees %s maker %s taker, taker consumes %s; maker %s remaining %s holding %s, gave up %s, released %s",
			t.MakerOrderID, trim(t.Quantity), trim(t.Price), trim(t.Notional), trim(t.MakerFee), trim(t.TakerFee),
			trim(t.TakerConsumes), t.Maker.Status, trim(t.Maker.Remaining), trim(t.Maker.Hold), trim(t.Maker.GivesUp),
			trim(t.Maker.Release)))
	}
	if d.Filled.IsPos() {
		lines = append(lines, fmt.Sprintf("filled %s, notional %s, fees %s", trim(d.Filled), trim(d.Notional), trim(d.Fees)))
	}
	for _, c := range d.Canceled {
		lines = append(lines, fmt.Sprintf("canceled maker %s %s, releasing %s %s", c.OrderID, c.Reason, trim(c.Release), c.Asset))
	}
	if d.Rests {
		lines = append(lines, fmt.Sprintf("rests %s holding %s", trim(d.Remaining), trim(d.RestingHold)))
	}
	if d.Release.IsPos() {
		lines = append(lines, fmt.Sprintf("release %s", trim(d.Release)))
	}
	for _, t := range d.Ledger {
		moves := make([]string, len(t.Moves))
		for i, m := range t.Moves {
			moves[i] = fmt.Sprintf("%s %s %s %s", account(m.Account), m.Asset, m.Part, trim(m.Amount))
		}
		lines = append(lines, fmt.Sprintf("%s %s: %s", t.Kind, t.OrderID, strings.Join(moves, ", ")))
	}
	return lines
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name        string
		order       orders.Order
		duplicateOf string
		halted      bool
		resting     []orders.Resting
		incomplete  bool   // the opposing side given is not every order it has
		minNotional string // the instrument's; none when empty
		available   string // the taker's available in the hold's asset
		want        []string
		wantCalls   []string // the opposing side's and the funds check's
		wantErr     error
	}{
		{
			name:      "a limit buy with nothing to take rests whole, holding its price and the taker fee",
			order:     takerOrder(orders.Buy, orders.Limit, orders.GTC, "1", "100"),
			available: "1000",
			want: []string{
				"open  tif gtc",
				"hold 100.2 USD",
				"rests 1 holding 100.2",
				"hold ORD_T: T USD available -100.2, T USD held 100.2",
			},
			wantCalls: []string{"opposing up to 100", "funds 100.2 USD"},
		},
		{
			name:      "a limit order naming no time in force is gtc",
			order:     takerOrder(orders.Buy, orders.Limit, "", "1", "100"),
			available: "1000",
			want: []string{
				"open  tif gtc",
				"hold 100.2 USD",
				"rests 1 holding 100.2",
				"hold ORD_T: T USD available -100.2, T USD held 100.2",
			},
			wantCalls: []string{"opposing up to 100", "funds 100.2 USD"},
		},
		{
			name:      "a market buy naming none is ioc, held at the band's top, and releases the rest",
			order:     takerOrder(orders.Buy, orders.Market, "", "1", ""),
			resting:   []orders.Resting{restingHeld("M1", orders.Sell, "100", "0.4")},
			available: "1000",
			want: []string{
				"canceled unfilled_market tif ioc",
				"hold 110.22 USD",
				"trade M1 0.4 at 100: notional 40, fees 0.04 maker 0.08 taker, taker consumes 40.08; maker filled remaining 0 holding 0, gave up 0.4, released 0",
				"filled 0.4, notional 40, fees 0.08",
				"release 70.14",
				"hold ORD_T: T USD available -110.22, T USD held 110.22",
				"trade ORD_T: T USD held -40.08, T BTC available 0.4, M BTC held -0.4, M USD available 39.96, venue USD available 0.12",
				"release ORD_T: T USD held -70.14, T USD available 70.14",
			},
			wantCalls: []string{"opposing up to 110", "funds 110.22 USD"},
		},
		{
			name:      "a market sell reaches down to the band's bottom only",
			order:     takerOrder(orders.Sell, orders.Market, orders.IOC, "1", ""),
			resting:   []orders.Resting{restingHeld("M1", orders.Buy, "85", "1")},
			available: "1",
			want:      []string{"canceled unfilled_market tif ioc"},
			wantCalls: []string{"opposing up to 90", "funds 1 BTC"},
		},
		{
			name:      "a limit buy takes an ask and rests the remainder, releasing what it needs no more",
			order:     takerOrder(orders.Buy, orders.Limit, orders.GTC, "2", "100"),
			resting:   []orders.Resting{restingHeld("M1", orders.Sell, "99.5", "1")},
			available: "200.4",
			want: []string{
				"partially_filled  tif gtc",
				"hold 200.4 USD",
				"trade M1 1 at 99.5: notional 99.5, fees 0.0995 maker 0.199 taker, taker consumes 99.699; maker filled remaining 0 holding 0, gave up 1, released 0",
				"filled 1, notional 99.5, fees 0.199",
				"rests 1 holding 100.2",
				"release 0.501",
				"hold ORD_T: T USD available -200.4, T USD held 200.4",
				"trade ORD_T: T USD held -99.699, T BTC available 1, M BTC held -1, M USD available 99.4005, venue USD available 0.2985",
				"release ORD_T: T USD held -0.501, T USD available 0.501",
			},
			wantCalls: []string{"opposing up to 100", "funds 200.4 USD"},
		},
		{
			name:      "a buy maker filled whole leaves the book and releases its fee margin",
			order:     takerOrder(orders.Sell, orders.Limit, orders.GTC, "1", "100"),
			resting:   []orders.Resting{restingHeld("M1", orders.Buy, "100", "1")},
			available: "1",
			want: []string{
				"filled  tif gtc",
				"hold 1 BTC",
				"trade M1 1 at 100: notional 100, fees 0.1 maker 0.2 taker, taker consumes 1; maker filled remaining 0 holding 0, gave up 100.1, released 0.1",
				"filled 1, notional 100, fees 0.2",
				"hold ORD_T: T BTC available -1, T BTC held 1",
				"trade ORD_T: T BTC held -1, T USD available 99.8, M USD held -100.1, M BTC available 1, venue USD available 0.3",
				"release M1: M USD held -0.1, M USD available 0.1",
			},
			wantCalls: []string{"opposing up to 100", "funds 1 BTC"},
		},
		{
			name:      "a maker filled in part keeps holding for its remainder",
			order:     takerOrder(orders.Sell, orders.Limit, orders.IOC, "0.5", "100"),
			resting:   []orders.Resting{restingHeld("M1", orders.Buy, "100", "1")},
			available: "1",
			want: []string{
				"filled  tif ioc",
				"hold 0.5 BTC",
				"trade M1 0.5 at 100: notional 50, fees 0.05 maker 0.1 taker, taker consumes 0.5; maker partially_filled remaining 0.5 holding 50.15, gave up 50.05, released 0",
				"filled 0.5, notional 50, fees 0.1",
				"hold ORD_T: T BTC available -0.5, T BTC held 0.5",
				"trade ORD_T: T BTC held -0.5, T USD available 49.9, M USD held -50.05, M BTC available 0.5, venue USD available 0.15",
			},
			wantCalls: []string{"opposing up to 100", "funds 0.5 BTC"},
		},
		{
			name:      "an ioc with nothing to take is canceled, holding nothing",
			order:     takerOrder(orders.Buy, orders.Limit, orders.IOC, "1", "100"),
			available: "1000",
			want:      []string{"canceled unfilled_ioc tif ioc"},
			wantCalls: []string{"opposing up to 100", "funds 100.2 USD"},
		},
		{
			name:      "an fok that cannot fill whole does nothing",
			order:     takerOrder(orders.Buy, orders.Limit, orders.FOK, "2", "100"),
			resting:   []orders.Resting{restingHeld("M1", orders.Sell, "99.5", "1")},
			available: "1000",
			want:      []string{"canceled fok_unfillable tif fok"},
			wantCalls: []string{"opposing up to 100", "funds 200.4 USD"},
		},
		{
			name:  "the account's own resting order stops matching",
			order: takerOrder(orders.Buy, orders.Limit, orders.GTC, "1", "100"),
			resting: []orders.Resting{func() orders.Resting {
				r := restingHeld("M1", orders.Sell, "99", "1")
				r.Account = "T"
				return r
			}()},
			available: "1000",
			want:      []string{"canceled self_trade_prevented tif gtc"},
			wantCalls: []string{"opposing up to 100", "funds 100.2 USD"},
		},
		{
			name:        "another order holds the client order id",
			order:       takerOrder(orders.Buy, orders.Limit, orders.GTC, "1", "100"),
			duplicateOf: "ORD_FIRST",
			available:   "1000",
			want:        []string{"rejected duplicate_client_order_idORD_FIRST tif gtc"},
		},
		{
			name:      "a halted instrument",
			order:     takerOrder(orders.Buy, orders.Limit, orders.GTC, "1", "100"),
			halted:    true,
			available: "1000",
			want:      []string{"rejected instrument_halted tif gtc"},
		},
		{
			name:      "a limit price outside the band",
			order:     takerOrder(orders.Buy, orders.Limit, orders.GTC, "1", "110.01"),
			available: "1000",
			want:      []string{"rejected price_out_of_band tif gtc"},
		},
		{
			name: "a post-only order that would take",
			order: func() orders.Order {
				o := takerOrder(orders.Buy, orders.Limit, orders.GTC, "1", "100")
				o.PostOnly = true
				return o
			}(),
			resting:   []orders.Resting{restingHeld("M1", orders.Sell, "99.5", "1")},
			available: "1000",
			want:      []string{"rejected post_only_would_take tif gtc"},
			wantCalls: []string{"opposing up to 100"},
		},
		{
			name:      "a hold the account cannot pay for",
			order:     takerOrder(orders.Buy, orders.Limit, orders.GTC, "1", "100"),
			resting:   []orders.Resting{restingHeld("M1", orders.Sell, "99.5", "1")},
			available: "100.19",
			want:      []string{"rejected insufficient_funds tif gtc"},
			wantCalls: []string{"opposing up to 100", "funds 100.2 USD"},
		},
		{
			name:       "more of the book needed: nothing decided, no funds checked",
			order:      takerOrder(orders.Buy, orders.Market, orders.IOC, "1", ""),
			incomplete: true,
			available:  "1000",
			wantCalls:  []string{"opposing up to 110"},
			wantErr:    orders.ErrIncompleteBook,
		},
		{name: "a quantity of zero", order: takerOrder(orders.Buy, orders.Limit, orders.GTC, "0", "100"), wantErr: orders.ErrMalformedOrder},
		{
			name:        "a malformed quantity before a duplicate client order id",
			order:       takerOrder(orders.Buy, orders.Limit, orders.GTC, "0", "100"),
			duplicateOf: "ORD_FIRST",
			wantErr:     orders.ErrMalformedOrder,
		},
		{
			name:    "a quantity with more decimals than the ledger keeps",
			order:   takerOrder(orders.Buy, orders.Limit, orders.GTC, "0.0000000000000000001", "100"),
			wantErr: orders.ErrMalformedOrder,
		},
		{name: "a limit order without a price", order: takerOrder(orders.Buy, orders.Limit, orders.GTC, "1", ""), wantErr: orders.ErrMalformedOrder},
		{
			name:    "a limit price with more decimals than the ledger keeps",
			order:   takerOrder(orders.Buy, orders.Limit, orders.GTC, "1", "0.0000000000000000001"),
			wantErr: orders.ErrMalformedOrder,
		},
		{name: "a market order with a price", order: takerOrder(orders.Buy, orders.Market, orders.IOC, "1", "100"), wantErr: orders.ErrMalformedOrder},
		{name: "a type no order has", order: takerOrder(orders.Buy, "stop", orders.GTC, "1", "100"), wantErr: orders.ErrMalformedOrder},
		{
			name:      "a time in force no order has",
			order:     takerOrder(orders.Buy, orders.Limit, "day", "1", "100"),
			wantCalls: []string{"opposing up to 100"},
			wantErr:   orders.ErrMalformedOrder,
		},
		{
			name:      "a hold with more decimals than the ledger keeps",
			order:     takerOrder(orders.Buy, orders.Limit, orders.GTC, "0.000000000000000001", "100.01"),
			available: "1000",
			want:      []string{"rejected amount_too_large tif gtc"},
		},
		{
			// 9 decimals (2 of price, 3 of quantity, 4 of a basis point):
			// a worst case must stay below 10^10.
			name:      "a buy whose worst case the decimal type cannot hold",
			order:     takerOrder(orders.Buy, orders.Limit, orders.GTC, "100000000", "100"),
			available: "100000000000",
			want:      []string{"rejected amount_too_large tif gtc"},
		},
		{
			name:      "a sell is held to the budget at the band's top, where it may fill",
			order:     takerOrder(orders.Sell, orders.Limit, orders.GTC, "90800000", "90"),
			available: "100000000",
			want:      []string{"rejected amount_too_large tif gtc"},
		},
		{
			name:      "a buy of that quantity at its own low limit fits",
			order:     takerOrder(orders.Buy, orders.Limit, orders.GTC, "90800000", "90"),
			available: "10000000000",
			want: []string{
				"open  tif gtc",
				"hold 8188344000 USD",
				"rests 90800000 holding 8188344000",
				"hold ORD_T: T USD available -8188344000, T USD held 8188344000",
			},
			wantCalls: []string{"opposing up to 90", "funds 8188344000 USD"},
		},
		{
			name:      "a maker whose fill cannot be exact is canceled, and the taker matches on",
			order:     takerOrder(orders.Sell, orders.Limit, orders.GTC, "0.501", "100"),
			resting:   []orders.Resting{restingHeld("M1", orders.Buy, "100.01", "10000000000"), restingHeld("M2", orders.Buy, "100", "1")},
			available: "1",
			want: []string{
				"filled  tif gtc",
				"hold 0.501 BTC",
				"trade M2 0.501 at 100: notional 50.1, fees 0.0501 maker 0.1002 taker, taker consumes 0.501; maker partially_filled remaining 0.499 holding 50.0499, gave up 50.1501, released 0",
				"filled 0.501, notional 50.1, fees 0.1002",
				"canceled maker M1 amount_too_large, releasing 1002100200000 USD",
				"release M1: M USD held -1002100200000, M USD available 1002100200000",
				"hold ORD_T: T BTC available -0.501, T BTC held 0.501",
				"trade ORD_T: T BTC held -0.501, T USD available 49.9998, M USD held -50.1501, M BTC available 0.501, venue USD available 0.1503",
			},
			wantCalls: []string{"opposing up to 100", "funds 0.501 BTC"},
		},
		{
			name:      "a taker rejected leaves the maker it would have canceled",
			order:     takerOrder(orders.Sell, orders.Limit, orders.GTC, "0.501", "100"),
			resting:   []orders.Resting{restingHeld("M1", orders.Buy, "100.01", "10000000000"), restingHeld("M2", orders.Buy, "100", "1")},
			available: "0.4",
			want:      []string{"rejected insufficient_funds tif gtc"},
			wantCalls: []string{"opposing up to 100", "funds 0.501 BTC"},
		},
		{
			name:      "an fok short once the maker is canceled fills nothing; the cancel stands",
			order:     takerOrder(orders.Sell, orders.Limit, orders.FOK, "2.001", "100"),
			resting:   []orders.Resting{restingHeld("M1", orders.Buy, "100.01", "10000000000"), restingHeld("M2", orders.Buy, "100", "1")},
			available: "3",
			want: []string{
				"canceled fok_unfillable tif fok",
				"canceled maker M1 amount_too_large, releasing 1002100200000 USD",
				"release M1: M USD held -1002100200000, M USD available 1002100200000",
			},
			wantCalls: []string{"opposing up to 100", "funds 2.001 BTC"},
		},
		{
			name:        "a market order under the minimum notional at its first fill's price trades nothing",
			order:       takerOrder(orders.Sell, orders.Market, orders.IOC, "0.5", ""),
			resting:     []orders.Resting{restingHeld("M1", orders.Buy, "95", "1")},
			minNotional: "50",
			available:   "1",
			want:        []string{"canceled below_min_notional tif ioc"},
			wantCalls:   []string{"opposing up to 90", "funds 0.5 BTC"},
		},
		{
			name:        "a market order at the minimum notional at its first fill's price trades",
			order:       takerOrder(orders.Buy, orders.Market, orders.IOC, "0.5", ""),
			resting:     []orders.Resting{restingHeld("M1", orders.Sell, "100", "1")},
			minNotional: "50",
			available:   "100",
			want: []string{
				"filled  tif ioc",
				"hold 55.11 USD",
				"trade M1 0.5 at 100: notional 50, fees 0.05 maker 0.1 taker, taker consumes 50.1; maker partially_filled remaining 0.5 holding 0.5, gave up 0.5, released 0",
				"filled 0.5, notional 50, fees 0.1",
				"release 5.01",
				"hold ORD_T: T USD available -55.11, T USD held 55.11",
				"trade ORD_T: T USD held -50.1, T BTC available 0.5, M BTC held -0.5, M USD available 49.95, venue USD available 0.15",
				"release ORD_T: T USD held -5.01, T USD available 5.01",
			},
			wantCalls: []string{"opposing up to 110", "funds 55.11 USD"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := btcUSD
			in.Halted = tt.halted
			if tt.minNotional != "" {
				in.MinNotional = amt(tt.minNotional)
			}
			var calls []string
			opposing := func(worst decimal.Decimal) orders.Book {
				calls = append(calls, "opposing up to "+worst.Trim(0).String())
				return orders.Book{Resting: tt.resting, Complete: !tt.incomplete}
			}
			funds := func(asset string, amount decimal.Decimal) bool {
				calls = append(calls, fmt.Sprintf("funds %s %s", amount.Trim(0), asset))
				return amt(tt.available).Cmp(amount) >= 0
			}
			restingBefore := slices.Clone(tt.resting)
			d, err := orders.Decide(tt.order, in, tt.duplicateOf, opposing, funds)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Decide = %v, %v; want %v", describeDecision(d), err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			} else if got := describeDecision(d); !slices.Equal(got, tt.want) {
				t.Errorf("decided\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(tt.want, "\n\t"))
			}
			if !slices.Equal(calls, tt.wantCalls) {
				t.Errorf("calls %q, want %q", calls, tt.wantCalls)
			}
			if !slices.Equal(restingBefore, tt.resting) {
				t.Errorf("Decide changed the resting orders it was given")
			}
		})
	}
}

// A maker holding less than its fill consumes is a book contradicting
// itself: no order's fault, and no malformed order.
func TestDecideRefusesABookThatContradictsItself(t *testing.T) {
	maker := restingHeld("M1", orders.Buy, "100", "1")
	maker.Hold = amt("50")
	_, err := orders.Decide(takerOrder(orders.Sell, orders.Limit, orders.GTC, "1", "100"), btcUSD, "",
		func(decimal.Decimal) orders.Book {
			return orders.Book{Resting: []orders.Resting{maker}, Complete: true}
		},
		func(string, decimal.Decimal) bool { return true })
	if err == nil || errors.Is(err, orders.ErrMalformedOrder) || errors.Is(err, orders.ErrIncompleteBook) {
		t.Fatalf("Decide = %v, want a failure of its own", err)
	}
}

// TestDecisionsBalance: random orders against random books; whatever is
// decided, every ledger transaction balances per asset and moves no zero,
// the hold is exactly what the fills consume, the remainder keeps and the
// release returns, and each maker's hold is what its fill consumed, what it
// released and what it keeps.
func TestDecisionsBalance(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		side := rapid.SampledFrom([]orders.Side{orders.Buy, orders.Sell}).Draw(t, "side")
		typ := rapid.SampledFrom([]orders.OrderType{orders.Limit, orders.Market}).Draw(t, "type")
		tif := orders.IOC
		price := ""
		if typ == orders.Limit {
			tif = rapid.SampledFrom([]orders.TimeInForce{orders.GTC, orders.IOC, orders.FOK}).Draw(t, "tif")
			price = drawPrice(t, "price").String()
		}
		order := takerOrder(side, typ, tif, drawQuantity(t, "quantity", 50).String(), price)
		var resting []orders.Resting
		for i := range rapid.IntRange(0, 6).Draw(t, "makers") {
			r := restingHeld(fmt.Sprintf("M%d", i), side.Opposite(), drawPrice(t, "maker price").String(),
				drawQuantity(t, "maker quantity", 30).String())
			r.Sequence = int64(i)
			if rapid.IntRange(0, 5).Draw(t, "own") == 0 {
				r.Account = order.Account
			}
			resting = append(resting, r)
		}
		sortBook(side, resting)
		checks := 0
		d, err := orders.Decide(order, btcUSD, "",
			func(decimal.Decimal) orders.Book { return orders.Book{Resting: resting, Complete: true} },
			func(string, decimal.Decimal) bool { checks++; return rapid.Bool().Draw(t, "funds") })
		if err != nil {
			t.Fatal(err)
		}
		if checks > 1 {
			t.Fatalf("%d funds checks", checks)
		}
		checkDecision(t, order, resting, d)
	})
}

// sortBook puts resting orders in the priority a taker on side meets them.
func sortBook(side orders.Side, resting []orders.Resting) {
	slices.SortStableFunc(resting, func(a, b orders.Resting) int {
		if side == orders.Buy {
			return a.Price.Cmp(b.Price)
		}
		return b.Price.Cmp(a.Price)
	})
}

// checkDecision holds a decision of order against resting to what every
// decision keeps: each ledger transaction balances per asset and moves no
// zero; the taker's hold is exactly what its fills consume, its remainder
// keeps and its release returns; each filled maker's hold is what its fill
// consumed, what it released and what it keeps; each canceled maker
// releases its whole hold and trades nothing; a rejection changes nothing.
func checkDecision(t *rapid.T, order orders.Order, resting []orders.Resting, d orders.Decision) {
	byID := make(map[string]orders.Resting, len(resting))
	for _, r := range resting {
		byID[r.OrderID] = r
	}
	for _, tx := range d.Ledger {
		sums := map[string]*big.Rat{}
		for _, m := range tx.Moves {
			if m.Amount.IsZero() {
				t.Fatalf("%s %s moves zero", tx.Kind, tx.OrderID)
			}
			if sums[m.Asset] == nil {
				sums[m.Asset] = new(big.Rat)
			}
			sums[m.Asset].Add(sums[m.Asset], orders.Rational(m.Amount))
		}
		for asset, sum := range sums {
			if sum.Sign() != 0 {
				t.Fatalf("%s %s moves %s %s in all", tx.Kind, tx.OrderID, sum.RatString(), asset)
			}
		}
	}
	if d.Status == orders.StatusRejected && (len(d.Ledger) > 0 || len(d.Canceled) > 0 || len(d.Trades) > 0) {
		t.Fatalf("rejected %s, yet %d transactions, %d makers canceled", d.RejectReason, len(d.Ledger), len(d.Canceled))
	}
	canceled := map[string]bool{}
	for _, c := range d.Canceled {
		maker, found := byID[c.OrderID]
		switch {
		case !found || canceled[c.OrderID]:
			t.Fatalf("canceled %s, not in the book or twice", c.OrderID)
		case c.Release.Cmp(maker.Hold) != 0:
			t.Fatalf("canceled %s releases %s of a hold of %s", c.OrderID, c.Release, maker.Hold)
		case c.Transaction >= 0 && (d.Ledger[c.Transaction].Kind != orders.KindRelease || d.Ledger[c.Transaction].OrderID != c.OrderID):
			t.Fatalf("canceled %s names transaction %d, a %s of %s", c.OrderID, c.Transaction,
				d.Ledger[c.Transaction].Kind, d.Ledger[c.Transaction].OrderID)
		}
		canceled[c.OrderID] = true
	}
	if len(d.Trades) == 0 && !d.Hold.IsPos() {
		return
	}
	spent := new(big.Rat).Add(orders.Rational(d.RestingHold), orders.Rational(d.Release))
	filled := new(big.Rat)
	for i, tr := range d.Trades {
		spent.Add(spent, orders.Rational(tr.TakerConsumes))
		filled.Add(filled, orders.Rational(tr.Quantity))
		if d.Ledger[tr.Transaction].Kind != orders.KindTrade {
			t.Fatalf("trade %d names transaction %d, a %s", i, tr.Transaction, d.Ledger[tr.Transaction].Kind)
		}
		maker, found := byID[tr.MakerOrderID]
		if !found || canceled[tr.MakerOrderID] {
			t.Fatalf("trade %d with %s, canceled or not in the book", i, tr.MakerOrderID)
		}
		makerHeld := new(big.Rat).Add(orders.Rational(tr.Maker.GivesUp), orders.Rational(tr.Maker.Release))
		makerHeld.Add(makerHeld, orders.Rational(tr.Maker.Hold))
		if makerHeld.Cmp(orders.Rational(maker.Hold)) != 0 {
			t.Fatalf("maker %s held %s, accounts for %s", tr.MakerOrderID, maker.Hold, makerHeld.RatString())
		}
	}
	if spent.Cmp(orders.Rational(d.Hold)) != 0 {
		t.Fatalf("a hold of %s accounts for %s", d.Hold, spent.RatString())
	}
	whole := new(big.Rat).Add(orders.Rational(d.Filled), orders.Rational(d.Remaining))
	if filled.Cmp(orders.Rational(d.Filled)) != 0 || whole.Cmp(orders.Rational(order.Quantity)) != 0 {
		t.Fatalf("filled %s of %s, %s remaining, by the trades %s", d.Filled, order.Quantity, d.Remaining, filled.RatString())
	}
}

// seededBTCUSD is BTC-USD as the migrations seed it: its amounts have 11
// decimals, so the door admits worst cases up to 10^7 USD.
var seededBTCUSD = orders.Instrument{Symbol: "BTC-USD", Base: "BTC", Quote: "USD",
	TickSize: amt("0.01"), LotSize: amt("0.00001"), MinNotional: amt("10"), ReferencePrice: amt("50000"),
	MakerFeeBps: amt("10"), TakerFeeBps: amt("20"), PriceBandPercent: amt("10")}

// drawLots is a multiple of the lot from one lot to most, often near most.
func drawLots(t *rapid.T, label string, lot decimal.Decimal, most decimal.Decimal) decimal.Decimal {
	steps, _, err := most.QuoRem(lot)
	if err != nil || steps.Cmp(decimal.One) < 0 {
		return lot
	}
	n, _, _ := steps.Int64(0)
	var drawn int64
	if rapid.Bool().Draw(t, label+" near the limit") {
		drawn = n - rapid.Int64Range(0, min(n-1, 1000)).Draw(t, label+" below the limit")
	} else {
		drawn = rapid.Int64Range(1, n).Draw(t, label)
	}
	q, err := decimal.New(drawn, 0)
	if err == nil {
		q, err = q.Mul(lot)
	}
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestDecideNeverFailsOnArithmetic: orders up to the door's limits
// (CheckAmounts) against books of makers up to them too, and a few beyond
// them, as an old release admitted (any amount whose hold was exact), at
// references anywhere in a few bands: Decide never fails, and what it
// decides keeps checkDecision.
func TestDecideNeverFailsOnArithmetic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := seededBTCUSD
		in.LastPrice = decimal.MustNew(rapid.Int64Range(3000000, 7000000).Draw(t, "last price"), 2)
		low, high, err := in.Band()
		if err != nil {
			t.Fatal(err)
		}
		ticks := func(label string, from, to decimal.Decimal) decimal.Decimal {
			a, _ := from.Mul(decimal.MustNew(100, 0))
			b, _ := to.Mul(decimal.MustNew(100, 0))
			lo, _, _ := a.Int64(0)
			hi, _, _ := b.Int64(0)
			return decimal.MustNew(rapid.Int64Range(lo, hi).Draw(t, label), 2)
		}
		side := rapid.SampledFrom([]orders.Side{orders.Buy, orders.Sell}).Draw(t, "side")
		typ := rapid.SampledFrom([]orders.OrderType{orders.Limit, orders.Market}).Draw(t, "type")
		cmd := orders.PlaceCommand{Side: side, Type: typ}
		if typ == orders.Limit {
			cmd.Price = ticks("price", low, high)
		}
		budget, _, err := in.BudgetPrice(side, typ, cmd.Price)
		if err != nil {
			t.Fatal(err)
		}
		most, _ := in.MaxNotional().Quo(budget)
		cmd.Quantity = drawLots(t, "quantity", in.LotSize, most)
		if in.CheckAmounts(cmd) != nil {
			cmd.Quantity = in.LotSize
		}
		tif := orders.IOC
		if typ == orders.Limit {
			tif = rapid.SampledFrom([]orders.TimeInForce{orders.GTC, orders.IOC, orders.FOK}).Draw(t, "tif")
		}
		order := orders.Order{ID: "ORD_T", ClientOrderID: "c-1", Account: "T", Symbol: in.Symbol, Side: side, Type: typ,
			TimeInForce: tif, Quantity: cmd.Quantity}
		if typ == orders.Limit {
			order.Price = &cmd.Price
		}

		var resting []orders.Resting
		for i := range rapid.IntRange(0, 6).Draw(t, "makers") {
			price := ticks("maker price", low, high)
			var quantity decimal.Decimal
			if rapid.IntRange(0, 4).Draw(t, "legacy") == 0 {
				// Beyond the door's limits, as an old release took them:
				// whole coins by the thousand to the billion, whose holds
				// are exact but leave no digit for a fill's decimals.
				whole := rapid.Int64Range(1, 999).Draw(t, "legacy coins")
				for range rapid.IntRange(1, 7).Draw(t, "legacy magnitude") {
					whole *= 10
				}
				quantity = decimal.MustNew(whole, 0)
			} else {
				most, _ := in.MaxNotional().Quo(price)
				quantity = drawLots(t, "maker quantity", in.LotSize, most)
			}
			hold, err := orders.Hold(side.Opposite(), quantity, price, in.TakerFeeBps)
			if err != nil {
				continue // an old release could not have rested it either
			}
			account := fmt.Sprintf("M%d", i)
			if rapid.IntRange(0, 7).Draw(t, "own") == 0 {
				account = order.Account
			}
			resting = append(resting, orders.Resting{OrderID: fmt.Sprintf("M%d", i), Account: account, Price: price,
				Remaining: quantity, Sequence: int64(i), Hold: hold})
		}
		sortBook(side, resting)
		d, err := orders.Decide(order, in, "",
			func(decimal.Decimal) orders.Book { return orders.Book{Resting: resting, Complete: true} },
			func(string, decimal.Decimal) bool { return true })
		if err != nil {
			t.Fatalf("Decide %s %s %s at %v against %d makers: %v", side, typ, cmd.Quantity, deref(order.Price), len(resting), err)
		}
		if d.Status == orders.StatusRejected {
			t.Fatalf("an order within the door's limits rejected %s", d.RejectReason)
		}
		checkDecision(t, order, resting, d)
	})
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
