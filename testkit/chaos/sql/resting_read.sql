-- Every resting order (open or partially filled) of every instrument, read
-- straight from the orders table as the audit sees them, for the checker to
-- compare with the books owners hold and load: (symbol, side, id, account
-- id, price, remaining quantity, hold, book sequence), NUMERIC as trimmed
-- text, in no particular order (the checker sorts them by priority itself,
-- so it shares no ordering with the owner's load).
SELECT symbol, side, id, account_id, trim_scale(price)::text, trim_scale(quantity - filled_quantity)::text,
    trim_scale(hold)::text, coalesce(sequence, 0)
FROM orders
WHERE status IN ('open', 'partially_filled')
