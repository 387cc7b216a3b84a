-- An order row with its instrument's grid, in the columns scanOrder
-- (history.go) reads: the order, its time in force and post-only flag, its
-- status and reasons, the order holding its client order id when another
-- does, what filled (quantity, notional: the average fill
-- price is notional / quantity, computed by scanOrder), what remains and the
-- fees it paid, its times, and the decimals of the tick size, the lot size
-- and the quote asset. trim_scale undoes NUMERIC(38,18)'s padding, which
-- would otherwise overflow the decimal type's 19 digits for any amount of 2
-- or more integer digits. Its readers append the WHERE clause:
-- History.Order one order's, History.List a page's, whose predicates depend
-- on the query.
SELECT o.id, o.client_order_id, o.account_id, o.symbol, o.side, o.type, o.time_in_force, o.post_only,
    trim_scale(o.quantity)::text, trim_scale(o.price)::text, o.status, o.reject_reason, o.cancel_reason, o.duplicate_of,
    trim_scale(o.filled_quantity)::text, trim_scale(o.filled_notional)::text,
    trim_scale(o.quantity - o.filled_quantity)::text, trim_scale(o.fees)::text,
    o.created_at, o.finished_at, scale(trim_scale(i.tick_size)), scale(trim_scale(i.lot_size)), q.scale
FROM orders o JOIN instruments i ON i.symbol = o.symbol JOIN assets q ON q.code = i.quote
