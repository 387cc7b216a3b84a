-- Every resting order of instrument $1, for an owner loading its book into
-- memory (under the instrument's lock, which every writer of a resting order
-- takes first): side, id, account, price, remaining quantity, book sequence
-- and hold (NUMERIC as trimmed text), each side best first (asks by price
-- ascending, bids descending, then sequence), as the orders_book index
-- holds them.
SELECT o.side, o.id, o.account_id, trim_scale(o.price)::text, trim_scale(o.quantity - o.filled_quantity)::text,
    o.sequence, trim_scale(o.hold)::text
FROM orders o
WHERE o.symbol = $1 AND o.status IN ('open', 'partially_filled')
ORDER BY o.side, CASE WHEN o.side = 'sell' THEN o.price END, CASE WHEN o.side = 'buy' THEN o.price END DESC,
    o.sequence
