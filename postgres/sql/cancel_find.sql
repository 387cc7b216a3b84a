-- The symbol of the order $1 of the account $2. No row: the account has no
-- such order in the table.
SELECT symbol FROM orders WHERE id = $1 AND account_id = $2
