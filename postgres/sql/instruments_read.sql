-- Every instrument: symbol, base, quote, its grids, reference price, last
-- trade price ('' before the first), maker and taker fees (bps) and price
-- band (percent) as NUMERIC text, and its status.
SELECT symbol, base, quote, tick_size::text, lot_size::text, min_notional::text, reference_price::text,
    coalesce(last_price::text, ''), maker_fee_bps::text, taker_fee_bps::text, price_band_percent::text, status
FROM instruments
