-- The aggregated price levels of one instrument's book: its resting orders
-- (open, partially_filled) grouped by side and price, best first on each
-- side (bids by price descending, asks ascending), at most $2 levels a
-- side; both sides are range scans of orders_book.
-- $1 symbol, $2 depth (levels per side).
-- Rows: side ('buy' bids, 'sell' asks), price, quantity (the remaining
-- quantity, quantity - filled_quantity, summed), orders (how many), amounts
-- as trimmed NUMERIC text.
(SELECT side, trim_scale(price)::text, trim_scale(sum(quantity - filled_quantity))::text, count(*)
 FROM orders
 WHERE symbol = $1 AND side = 'buy' AND status IN ('open', 'partially_filled')
 GROUP BY side, price ORDER BY price DESC LIMIT $2)
UNION ALL
(SELECT side, trim_scale(price)::text, trim_scale(sum(quantity - filled_quantity))::text, count(*)
 FROM orders
 WHERE symbol = $1 AND side = 'sell' AND status IN ('open', 'partially_filled')
 GROUP BY side, price ORDER BY price ASC LIMIT $2)
