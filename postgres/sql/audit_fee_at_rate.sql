-- Audit check fee_at_rate (CheckTradeFees): every trade whose maker or taker
-- fee is not exactly its rate times the notional, as (subject, detail): fee ×
-- 10000 = quantity × price × fee_bps, compared by products so no division
-- rounds. Each trade keeps the rates it was charged at, so a later change of
-- the instrument's rates does not show here.
SELECT 'trade/' || t.id, format('maker fee %s, taker fee %s on %s × %s at %s/%s bps', trim_scale(t.maker_fee),
    trim_scale(t.taker_fee), trim_scale(t.quantity), trim_scale(t.price), trim_scale(t.maker_fee_bps), trim_scale(t.taker_fee_bps))
FROM trades t
WHERE t.maker_fee * 10000 <> t.quantity * t.price * t.maker_fee_bps
   OR t.taker_fee * 10000 <> t.quantity * t.price * t.taker_fee_bps
ORDER BY t.id
