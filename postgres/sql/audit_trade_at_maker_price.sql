-- Audit check trade_at_maker_price (CheckTradePrice): every trade not at its
-- maker order's limit price, as (subject, detail): no order ever fills at a
-- price no counterparty offered.
SELECT 'trade/' || t.id, format('at %s, its maker %s rests at %s', trim_scale(t.price), t.maker_order_id,
    coalesce(trim_scale(m.price)::text, 'no price'))
FROM trades t JOIN orders m ON m.id = t.maker_order_id
WHERE m.price IS DISTINCT FROM t.price
ORDER BY t.id
