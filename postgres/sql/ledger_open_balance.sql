-- Opens the balance of the account $1 in the asset $2 if it does not exist
-- yet. An account that does not exist gets no row.
INSERT INTO balances (account_id, asset)
SELECT id, $2 FROM accounts WHERE id = $1 ON CONFLICT DO NOTHING
