-- settle_events.sql as it was before it read its rows id by id (issue 24):
-- the plain statement, which TestSettleEventsRendersAsTheReference holds
-- the statement to, event for event, byte for byte.
-- The events of one write: per account and instrument of the orders $1
-- (text[], every order the write touched) and of the trades of the takers
-- $2 (text[]: a taker trades only in its own settlement, so these are the
-- write's trades), one outbox row "events:<account>:<symbol>"
-- (orders.EventsName) at that
-- source's next version (event_sources), whose payload is a snapshot, as
-- the write leaves them, of the account's orders and fills there, and the
-- ids of those of its orders whose row the write inserted, $3 (text[], a
-- subset of $1): their order.accepted events come with this write
-- (RenderEvents), since admission appends none:
--   {"orders": [order row, ...], "fills": [fill row, ...], "accepted": [order id, ...]}
-- An order row is the columns of order_select.sql, in its order (scanOrder
-- reads it; postgres/events.go holds the two to one list), a fill row the
-- columns of fills_list.sql from the account's side (scanExecution).
-- Runs after the write's statements, in its transaction. Returns the rows
-- (id, name, version, payload) for the relay.
WITH touched AS (
    SELECT o.account_id AS account, o.symbol, o.id AS sort_key, o.id = ANY($3::text[]) AS inserted, json_build_array(
    o.id, o.client_order_id, o.account_id, o.symbol, o.side, o.type, o.time_in_force, o.post_only,
    trim_scale(o.quantity)::text, trim_scale(o.price)::text, o.status, o.reject_reason, o.cancel_reason, o.duplicate_of,
    trim_scale(o.filled_quantity)::text, trim_scale(o.filled_notional)::text,
    trim_scale(o.quantity - o.filled_quantity)::text, trim_scale(o.fees)::text,
    o.created_at, o.finished_at, scale(trim_scale(i.tick_size)), scale(trim_scale(i.lot_size)), q.scale
    ) AS snapshot
    FROM orders o JOIN instruments i ON i.symbol = o.symbol JOIN assets q ON q.code = i.quote
    WHERE o.id = ANY($1::text[])
),
fills AS (
    SELECT side.account, t.symbol, t.id AS sort_key, json_build_array(
        t.id, side.order_id, t.symbol, side.liquidity, t.taker_side,
        trim_scale(t.price)::text, trim_scale(t.quantity)::text, trim_scale(side.fee)::text, t.created_at,
        scale(trim_scale(i.tick_size)), scale(trim_scale(i.lot_size)), q.scale, i.quote) AS snapshot
    FROM trades t
    CROSS JOIN LATERAL (VALUES
        (t.maker_account_id, t.maker_order_id, 'maker', t.maker_fee),
        (t.taker_account_id, t.taker_order_id, 'taker', t.taker_fee)) AS side (account, order_id, liquidity, fee)
    JOIN instruments i ON i.symbol = t.symbol JOIN assets q ON q.code = i.quote
    WHERE t.taker_order_id = ANY($2::text[])
),
orders_by_source AS (
    SELECT 'events:' || account || ':' || symbol AS name, json_agg(snapshot ORDER BY sort_key) AS list,
        json_agg(sort_key ORDER BY sort_key) FILTER (WHERE inserted) AS accepted
    FROM touched GROUP BY 1
),
fills_by_source AS (
    SELECT 'events:' || account || ':' || symbol AS name, json_agg(snapshot ORDER BY sort_key) AS list
    FROM fills GROUP BY 1
),
bumped AS (
    INSERT INTO event_sources (name, version)
    SELECT name, 1 FROM (SELECT name FROM orders_by_source UNION SELECT name FROM fills_by_source) AS sources ORDER BY name
    ON CONFLICT (name) DO UPDATE SET version = event_sources.version + 1
    RETURNING name, version
)
INSERT INTO outbox (name, version, payload)
SELECT b.name, b.version, json_build_object('orders', coalesce(o.list, '[]'), 'fills', coalesce(f.list, '[]'),
    'accepted', coalesce(o.accepted, '[]'))::text
FROM bumped b
LEFT JOIN orders_by_source o ON o.name = b.name
LEFT JOIN fills_by_source f ON f.name = b.name
ORDER BY b.name
RETURNING id, name, version, payload
