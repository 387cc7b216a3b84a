// Package ordergen writes random place-order bodies that are valid on the
// instruments the migrations seed (on their tick and lot grids, above their
// minimum notional, limit prices within 2% of the seeded reference, well
// inside the price band), for the tests that load the whole system with them:
// funds and the book, not the body, decide what becomes of such an order.
// Buys and sells draw from the same range, so they cross and trade.
package ordergen

import (
	"fmt"
	"math/rand/v2"
)

// Random is a JSON order body with the client order id: buy or sell, limit
// or (one in four) market, on BTC-USD, ETH-USD or ETH-BTC, with the default
// time in force.
func Random(r *rand.Rand, clientOrderID string) string {
	return random(r, clientOrderID, false)
}

// RandomMarket is Random with a time-in-force and post-only mix for the
// market's rules: of limit orders, about one in ten each is ioc, fok, and
// post-only (gtc); market orders keep their only time in force (ioc,
// omitted or sent). It draws the same orders as Random from the same
// generator state, then one number more for the mix.
func RandomMarket(r *rand.Rand, clientOrderID string) string {
	return random(r, clientOrderID, true)
}

func random(r *rand.Rand, clientOrderID string, mix bool) string {
	var extra string
	body := func(clientOrderID, symbol, side string, market bool, quantity, price string) string {
		if mix {
			extra = options(r, market)
		}
		return bodyOf(clientOrderID, symbol, side, market, quantity, price, extra)
	}
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
	default: // ETH-BTC: 0.010–5.000 ETH in lots of 0.005, 0.05880–0.06119
		quantity := decimalText(5*(2+r.IntN(998)), 3)
		price := fmt.Sprintf("0.0%d", 5880+r.IntN(240))
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

// options draws the time-in-force and post-only fields of one order, as
// JSON members to append (empty for the defaults).
func options(r *rand.Rand, market bool) string {
	n := r.IntN(10)
	if market {
		if n < 3 {
			return `,"time_in_force":"ioc"`
		}
		return ""
	}
	switch n {
	case 0:
		return `,"time_in_force":"ioc"`
	case 1:
		return `,"time_in_force":"fok"`
	case 2:
		return `,"post_only":true`
	case 3:
		return `,"time_in_force":"gtc"`
	}
	return ""
}

func bodyOf(clientOrderID, symbol, side string, market bool, quantity, price, extra string) string {
	if market {
		return fmt.Sprintf(`{"client_order_id":%q,"symbol":%q,"side":%q,"type":"market","quantity":%q%s}`, clientOrderID, symbol, side, quantity, extra)
	}
	return fmt.Sprintf(`{"client_order_id":%q,"symbol":%q,"side":%q,"type":"limit","quantity":%q,"price":%q%s}`, clientOrderID, symbol, side, quantity, price, extra)
}
