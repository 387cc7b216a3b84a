-- The resting orders of the instruments $1 (symbols), read under their
-- instrument locks: id, account, symbol, side, limit price, remaining
-- quantity (quantity less filled), book sequence and what the order still
-- holds, as trimmed NUMERIC text. The settler sorts each side best first.
SELECT id, account_id, symbol, side, trim_scale(price)::text, trim_scale(quantity - filled_quantity)::text,
    sequence, trim_scale(hold)::text
FROM orders
WHERE symbol = ANY($1::text[]) AND status IN ('open', 'partially_filled')
