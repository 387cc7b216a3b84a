-- Inserts ledger entries: $1 transaction ids, $2 accounts, $3 assets, $4
-- signed amounts, $5 parts (available or held), parallel arrays.
INSERT INTO ledger_entries (transaction_id, account_id, asset, amount, part)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::numeric[], $5::text[])
