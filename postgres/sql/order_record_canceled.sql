-- Writes the canceled row of an order the queue canceled before any worker
-- took it ($1..$8 the order, $9 when it was placed, $10 when it was
-- canceled: NULL is now, $11 its time in force: empty is the default of its
-- type, $12 post-only). Nothing filled and nothing is held; no cancel
-- reason: its client canceled it. An order that has its row already keeps
-- it, and nothing is inserted. An order whose client order id another order
-- holds (a retry admitted after Redis lost its dedup window) is recorded as
-- that order's duplicate.
INSERT INTO orders (id, account_id, client_order_id, symbol, side, type,
    quantity, price, status, created_at, finished_at, time_in_force, post_only, duplicate_of)
VALUES ($1, $2, $3, $4, $5, $6, $7::numeric, $8::numeric, 'canceled', $9, COALESCE($10, now()),
    COALESCE(NULLIF($11, ''), CASE WHEN $6 = 'market' THEN 'ioc' ELSE 'gtc' END), $12,
    (SELECT o.id FROM orders o WHERE o.account_id = $2 AND o.client_order_id = $3 AND o.duplicate_of IS NULL
       AND o.id <> $1))
ON CONFLICT (id) DO NOTHING
