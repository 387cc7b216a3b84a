-- Inserts ledger transactions with the ids drawn for them: $1 ids, $2
-- kinds (hold, release, trade), $3 the order each is for (the taker of a
-- trade), parallel arrays.
INSERT INTO ledger_transactions (id, kind, order_id) OVERRIDING SYSTEM VALUE
SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[])
