// Package ordergen writes random place-order bodies that are valid on the
// instruments the migrations seed (on their tick and lot grids, above their
// minimum notional), for the tests that load the whole system with them:
// funds, not the body, decide whether such an order settles.
package ordergen

import (
	"fmt"
	"math/rand/v2"
)

// Random is a JSON order body with the client order id: buy or sell, limit
// or (one in four) market, on BTC-USD, ETH-USD or ETH-BTC.
func Random(r *rand.Rand, clientOrderID string) string {
	side := []string{"buy", "sell"}[r.IntN(2)]
	switch r.IntN(3) {
	case 0: // BTC-USD: 0.00100–0.05000 BTC around 50000
		quantity := decimalText(100+r.IntN(4900), 5)
		price := fmt.Sprintf("%d.%02d", 49000+r.IntN(2000), r.IntN(100))
		return body(clientOrderID, "BTC-USD", side, r.IntN(4) == 0, quantity, price)
	case 1: // ETH-USD: 0.010–2.000 ETH around 3000, tick 0.05
		quantity := decimalText(10+r.IntN(1990), 3)
		price := fmt.Sprintf("%d.%02d", 2900+r.IntN(200), 5*r.IntN(20))
		return body(clientOrderID, "ETH-USD", side, r.IntN(4) == 0, quantity, price)
	default: // ETH-BTC: 0.010–5.000 ETH in lots of 0.005 around 0.06
		quantity := decimalText(5*(2+r.IntN(998)), 3)
		price := fmt.Sprintf("0.0%d", 5000+r.IntN(2000))
		return body(clientOrderID, "ETH-BTC", side, r.IntN(4) == 0, quantity, price)
	}
}

// decimalText writes units × 10^-decimals exactly, with all its decimals.
func decimalText(units, decimals int) string {
	scale := 1
	for range decimals {
		scale *= 10
	}
	return fmt.Sprintf("%d.%0*d", units/scale, decimals, units%scale)
}

func body(clientOrderID, symbol, side string, market bool, quantity, price string) string {
	if market {
		return fmt.Sprintf(`{"client_order_id":%q,"symbol":%q,"side":%q,"type":"market","quantity":%q}`, clientOrderID, symbol, side, quantity)
	}
	return fmt.Sprintf(`{"client_order_id":%q,"symbol":%q,"side":%q,"type":"limit","quantity":%q,"price":%q}`, clientOrderID, symbol, side, quantity, price)
}
