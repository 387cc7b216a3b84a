-- Every instrument, its grids and reference price as NUMERIC text.
SELECT symbol, base, quote, tick_size::text, lot_size::text,
    min_notional::text, reference_price::text, status FROM instruments
