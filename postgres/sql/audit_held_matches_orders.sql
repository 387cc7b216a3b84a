-- Audit check held_matches_orders (CheckHeldOrders): every balance whose held
-- part is not the sum of the holds of its account's resting orders (open or
-- partially_filled) in that asset, as (subject, detail). A buy holds the
-- instrument's quote asset, a sell its base asset. A resting order's hold on
-- a balance that has no row shows as a row of its own.
WITH resting AS (
    SELECT o.account_id, CASE o.side WHEN 'buy' THEN i.quote ELSE i.base END AS asset,
           sum(o.hold) AS hold, count(*) AS orders
    FROM orders o JOIN instruments i ON i.symbol = o.symbol
    WHERE o.status IN ('open', 'partially_filled')
    GROUP BY 1, 2
)
SELECT 'balances:' || coalesce(b.account_id, r.account_id) || ':' || coalesce(b.asset, r.asset),
       format('%s, its %s resting orders hold %s', coalesce('held ' || trim_scale(b.held), 'no balance row'),
           coalesce(r.orders, 0), trim_scale(coalesce(r.hold, 0)))
FROM balances b FULL JOIN resting r ON r.account_id = b.account_id AND r.asset = b.asset
WHERE b.account_id IS NULL OR b.held <> coalesce(r.hold, 0)
ORDER BY 1
