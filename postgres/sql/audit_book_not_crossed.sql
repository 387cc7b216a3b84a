-- Audit check book_not_crossed (CheckBookCrossed): every instrument whose
-- book is crossed at rest, as (subject, detail): its best resting bid (open
-- or partially_filled) is at or above its best resting ask. Matching leaves
-- no such pair behind: the later of the two would have traded.
SELECT symbol, format('best bid %s >= best ask %s', trim_scale(bid), trim_scale(ask))
FROM (
    SELECT symbol, max(price) FILTER (WHERE side = 'buy') AS bid, min(price) FILTER (WHERE side = 'sell') AS ask
    FROM orders WHERE status IN ('open', 'partially_filled') GROUP BY symbol
) book
WHERE bid >= ask
ORDER BY symbol
