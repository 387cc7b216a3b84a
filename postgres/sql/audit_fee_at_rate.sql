-- Audit check fee_at_rate (CheckTradeFees): every trade whose maker or taker
-- fee is not exactly the instrument's rate times the notional, as (subject,
-- detail): fee × 10000 = quantity × price × fee_bps, compared by products so
-- no division rounds. The rates are the instrument's current ones: a trade
-- made before a rate change shows up here, which the audit cannot tell from
-- a wrong fee (instruments keep no history of their rates).
SELECT 'trade/' || t.id, format('maker fee %s, taker fee %s on %s × %s at %s/%s bps', trim_scale(t.maker_fee),
    trim_scale(t.taker_fee), trim_scale(t.quantity), trim_scale(t.price), trim_scale(i.maker_fee_bps), trim_scale(i.taker_fee_bps))
FROM trades t JOIN instruments i ON i.symbol = t.symbol
WHERE t.maker_fee * 10000 <> t.quantity * t.price * i.maker_fee_bps
   OR t.taker_fee * 10000 <> t.quantity * t.price * i.taker_fee_bps
ORDER BY t.id
