-- Writes the canceled rows of orders the queue canceled before any worker
-- took them, many at once, each as order_record_canceled.sql writes one:
-- $1..$8 the orders (text[] each: id, account, client order id, symbol,
-- side, type, quantity, price: NULL for none), $9 when each was placed
-- (timestamptz[]), $10 when each was canceled (timestamptz[], NULL is now),
-- $11 each time in force (text[], empty is the default of its type), $12
-- each post-only flag (bool[]). Nothing filled and nothing is held; no
-- cancel reason: its client canceled it. An order that has its row already
-- keeps it, and nothing is inserted. An order whose client order id another
-- order holds (a retry admitted after Redis lost its dedup window, in the
-- table or among these) is recorded as that order's duplicate.
-- Returns one row per order: its id, the status its row holds afterwards
-- (canceled for a row inserted now) and whether it was inserted now.
WITH given AS (
    SELECT *
    FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
        $9::timestamptz[], $10::timestamptz[], $11::text[], $12::bool[])
        AS g (id, account_id, client_order_id, symbol, side, type, quantity, price,
            created_at, finished_at, time_in_force, post_only)
),
inserted AS (
    INSERT INTO orders (id, account_id, client_order_id, symbol, side, type,
        quantity, price, status, created_at, finished_at, time_in_force, post_only, duplicate_of)
    SELECT g.id, g.account_id, g.client_order_id, g.symbol, g.side, g.type, g.quantity::numeric, g.price::numeric,
        'canceled', g.created_at, COALESCE(g.finished_at, now()),
        COALESCE(NULLIF(g.time_in_force, ''), CASE WHEN g.type = 'market' THEN 'ioc' ELSE 'gtc' END), g.post_only,
        COALESCE(
            (SELECT o.id FROM orders o WHERE o.account_id = g.account_id AND o.client_order_id = g.client_order_id
               AND o.duplicate_of IS NULL AND o.id <> g.id),
            (SELECT min(d.id) FROM given d WHERE d.account_id = g.account_id AND d.client_order_id = g.client_order_id
               AND d.id < g.id AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.id = d.id)))
    FROM given g
    ON CONFLICT (id) DO NOTHING
    RETURNING id
)
SELECT g.id, COALESCE(o.status, 'canceled'), i.id IS NOT NULL
FROM given g
LEFT JOIN inserted i ON i.id = g.id
LEFT JOIN orders o ON o.id = g.id AND i.id IS NULL
