-- The two entries of the transfer transaction $1: the amount $5 of the asset
-- $4 debited from the account $2 and credited to the account $3.
INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
VALUES ($1, $2, $4, -$5::numeric), ($1, $3, $4, $5::numeric)
