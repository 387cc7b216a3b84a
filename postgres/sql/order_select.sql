-- An order row with its instrument's grid, in the columns scanOrder
-- (history.go) reads. trim_scale undoes NUMERIC(38,18)'s padding, which would
-- otherwise overflow the decimal type's 19 digits for any amount of 2 or more
-- integer digits. Its readers append the WHERE clause: History.Order one
-- order's, History.List a page's, whose predicates depend on the query.
SELECT o.id, o.client_order_id, o.account_id, o.symbol, o.side, o.type,
    trim_scale(o.quantity)::text, trim_scale(o.price)::text, o.status, o.reject_reason,
    trim_scale(o.fill_price)::text, trim_scale(o.fill_quantity)::text, trim_scale(o.fill_notional)::text,
    o.created_at, o.finished_at, scale(trim_scale(i.tick_size)), scale(trim_scale(i.lot_size))
FROM orders o JOIN instruments i ON i.symbol = o.symbol
