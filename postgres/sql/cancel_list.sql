-- The resting orders of the account $1, of the instrument $2 or of every
-- instrument when $2 is empty, oldest first.
SELECT id FROM orders
WHERE account_id = $1 AND ($2 = '' OR symbol = $2) AND status IN ('open', 'partially_filled')
ORDER BY id
