-- The part of a book a settlement batch's takers can reach, read under the
-- instrument locks (settle_instruments.sql) and without any balance lock:
-- per request i (1-based, the ordinality of the parallel arrays $1..$7:
-- symbol, the resting side to read, the bound (asks up to it, bids down to
-- it: the most aggressive taker's limit or protection price, or a price
-- past every order), the (price, sequence) the read starts after in the
-- side's priority (asks by price ascending, bids descending, then
-- sequence), the quantity the takers could take (NULL: no bound) and a row
-- limit), the resting orders best first, through the first one at which
-- the side's remaining quantity reaches that quantity, at most the limit:
-- i, id, account, price, remaining quantity, sequence and hold as trimmed
-- NUMERIC text, and whether the side's quantity reached the bound there.
-- Both branches walk the orders_book index (bids backwards, each price's
-- orders sorted by sequence), so a read costs its page, not the book.
SELECT w.i, a.id, a.account_id, trim_scale(a.price)::text, trim_scale(a.remaining)::text, a.sequence,
    trim_scale(a.hold)::text, coalesce(a.cumulative >= w.quantity, false)
FROM unnest($1::text[], $2::text[], $3::numeric[], $4::numeric[], $5::bigint[], $6::numeric[], $7::int[])
        WITH ORDINALITY AS w(symbol, side, bound, after_price, after_sequence, quantity, lim, i)
CROSS JOIN LATERAL (
    SELECT o.id, o.account_id, o.price, o.quantity - o.filled_quantity AS remaining, o.sequence, o.hold,
        sum(o.quantity - o.filled_quantity) OVER (ORDER BY o.price, o.sequence) AS cumulative
    FROM orders o
    WHERE w.side = 'sell' AND o.symbol = w.symbol AND o.side = 'sell' AND o.status IN ('open', 'partially_filled')
        AND o.price <= w.bound AND (o.price, o.sequence) > (w.after_price, w.after_sequence)
    ORDER BY o.price, o.sequence
    LIMIT w.lim
) a
WHERE w.quantity IS NULL OR a.cumulative - a.remaining < w.quantity
UNION ALL
SELECT w.i, b.id, b.account_id, trim_scale(b.price)::text, trim_scale(b.remaining)::text, b.sequence,
    trim_scale(b.hold)::text, coalesce(b.cumulative >= w.quantity, false)
FROM unnest($1::text[], $2::text[], $3::numeric[], $4::numeric[], $5::bigint[], $6::numeric[], $7::int[])
        WITH ORDINALITY AS w(symbol, side, bound, after_price, after_sequence, quantity, lim, i)
CROSS JOIN LATERAL (
    SELECT o.id, o.account_id, o.price, o.quantity - o.filled_quantity AS remaining, o.sequence, o.hold,
        sum(o.quantity - o.filled_quantity) OVER (ORDER BY o.price DESC, o.sequence) AS cumulative
    FROM orders o
    WHERE w.side = 'buy' AND o.symbol = w.symbol AND o.side = 'buy' AND o.status IN ('open', 'partially_filled')
        AND o.price >= w.bound AND o.price <= w.after_price
        AND NOT (o.price = w.after_price AND o.sequence <= w.after_sequence)
    ORDER BY o.price DESC, o.sequence
    LIMIT w.lim
) b
WHERE w.quantity IS NULL OR b.cumulative - b.remaining < w.quantity
