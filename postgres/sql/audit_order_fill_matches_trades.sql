-- Audit check order_fill_matches_trades (CheckOrderFill): every order whose
-- fill does not add up, as (subject, detail): filled_quantity above quantity;
-- filled_quantity, filled_notional (Σ quantity × price) or fees not the sums
-- over its trades, as maker and as taker (an order settled before the market
-- has no trades and keeps fill_quantity and fill_notional, without fees); or
-- a status its fill contradicts (filled but not whole, open or rejected with
-- a fill, partially_filled with none or all).
WITH fills AS (
    SELECT order_id, sum(quantity) AS quantity, sum(quantity * price) AS notional, sum(fee) AS fees, count(*) AS trades
    FROM (
        SELECT maker_order_id AS order_id, quantity, price, maker_fee AS fee FROM trades
        UNION ALL
        SELECT taker_order_id, quantity, price, taker_fee FROM trades
    ) s
    GROUP BY order_id
), checked AS (
    SELECT o.id, o.status, o.quantity, o.filled_quantity, o.filled_notional, o.fees, coalesce(f.trades, 0) AS trades,
           coalesce(f.quantity, 0) + CASE WHEN o.ledger_transaction_id IS NOT NULL THEN coalesce(o.fill_quantity, 0) ELSE 0 END AS want_quantity,
           coalesce(f.notional, 0) + CASE WHEN o.ledger_transaction_id IS NOT NULL THEN coalesce(o.fill_notional, 0) ELSE 0 END AS want_notional,
           coalesce(f.fees, 0) AS want_fees
    FROM orders o LEFT JOIN fills f ON f.order_id = o.id
)
SELECT id, CASE
    WHEN filled_quantity > quantity THEN format('filled %s of %s', trim_scale(filled_quantity), trim_scale(quantity))
    WHEN filled_quantity <> want_quantity
        THEN format('filled_quantity %s, its %s trades (and settlement) make %s', trim_scale(filled_quantity), trades, trim_scale(want_quantity))
    WHEN filled_notional <> want_notional
        THEN format('filled_notional %s, its %s trades (and settlement) make %s', trim_scale(filled_notional), trades, trim_scale(want_notional))
    WHEN fees <> want_fees THEN format('fees %s, its %s trades make %s', trim_scale(fees), trades, trim_scale(want_fees))
    ELSE format('%s with %s of %s filled', status, trim_scale(filled_quantity), trim_scale(quantity))
END
FROM checked
WHERE filled_quantity > quantity OR filled_quantity <> want_quantity OR filled_notional <> want_notional OR fees <> want_fees
   OR (status = 'filled' AND filled_quantity <> quantity)
   OR (status IN ('open', 'rejected') AND filled_quantity <> 0)
   OR (status = 'partially_filled' AND (filled_quantity = 0 OR filled_quantity >= quantity))
ORDER BY id
