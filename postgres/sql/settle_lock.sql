-- Locks the balance rows $1 (accounts) × $2 (assets), parallel arrays, in
-- (account, asset) order: ORDER BY runs before the lock, so the rows are
-- locked in that order, as every settlement, cancel, deposit and withdrawal
-- takes them. Returns account, asset, version, available and held (NUMERIC
-- text): the funds checks run on these, which nobody can change before this
-- transaction ends. A row missing from the answer does not exist.
-- FOR NO KEY UPDATE, not FOR UPDATE: no writer changes a balance's key (a
-- trigger refuses it), and the ledger entries a batch inserts before it
-- locks have their keys checked without a lock (migration 0016).
SELECT b.account_id, b.asset, b.version, trim_scale(b.available)::text, trim_scale(b.held)::text
FROM balances b
WHERE (b.account_id, b.asset) IN (SELECT * FROM unnest($1::text[], $2::text[]))
ORDER BY b.account_id, b.asset
FOR NO KEY UPDATE OF b
