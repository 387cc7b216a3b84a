-- Every instrument: its grids, reference price, fees, price band and last
-- trade price as NUMERIC text, and its status.
-- Inputs: none.
-- Rows: symbol, base, quote, tick_size, lot_size, min_notional,
-- reference_price, maker_fee_bps, taker_fee_bps, price_band_percent,
-- last_price (NULL before the first trade), status.
SELECT symbol, base, quote, tick_size::text, lot_size::text,
    min_notional::text, reference_price::text,
    maker_fee_bps::text, taker_fee_bps::text, price_band_percent::text,
    last_price::text, status
FROM instruments
