-- Audit check market_within_protection (CheckMarketProtection): every trade
-- of a market order beyond its protection price, as (subject, detail): a
-- market buy never pays more than its protection price, a sell never takes
-- less (the band's edge on its side around the reference it settled at,
-- which settlement writes on the row). Market orders settled before
-- migration 0012 have no protection price and are passed over.
SELECT 'trade/' || t.id, format('at %s, beyond the protection price %s of the market %s %s',
    trim_scale(t.price), trim_scale(o.protection_price), o.side, o.id)
FROM trades t
JOIN orders o ON o.id IN (t.taker_order_id, t.maker_order_id)
WHERE o.type = 'market' AND o.protection_price IS NOT NULL
  AND (o.side = 'buy' AND t.price > o.protection_price OR o.side = 'sell' AND t.price < o.protection_price)
ORDER BY t.id
