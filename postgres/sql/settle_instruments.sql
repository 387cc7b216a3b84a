-- Locks the instruments of a settlement batch or a cancel ($1, symbols) in
-- symbol order, which serializes matching per instrument: every settler and
-- every cancel of a resting order takes these locks first, in this order,
-- and its balance locks (settle_lock.sql) only after them, so none waits on
-- another in a cycle. Returns one row per instrument found: symbol, base,
-- quote, halted, tick size, reference price, last price ('' before the
-- first trade), maker and taker fee (bps), the band (percent), lot size
-- and minimum notional, as trimmed NUMERIC text. A symbol without a row is
-- no instrument.
SELECT symbol, base, quote, status = 'halted', trim_scale(tick_size)::text, trim_scale(reference_price)::text,
    coalesce(trim_scale(last_price)::text, ''), trim_scale(maker_fee_bps)::text, trim_scale(taker_fee_bps)::text,
    trim_scale(price_band_percent)::text, trim_scale(lot_size)::text, trim_scale(min_notional)::text
FROM instruments
WHERE symbol = ANY($1::text[])
ORDER BY symbol
FOR UPDATE
