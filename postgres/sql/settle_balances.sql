-- Moves the balances a settlement batch changed, by explicit deltas, and
-- writes one outbox row per balance at the version it reaches, in one
-- statement: $1 names (orders.BalanceName), $2 accounts, $3 assets, $4 what
-- the batch moved available by, $5 held by (numeric), $6 the version's
-- steps (bigint: one per ledger entry, one per hold or release), parallel
-- arrays in (account, asset) order. The rows are locked already
-- (settle_lock.sql), each named once. The payload is name@version.
-- Returns the outbox rows (id, name, version, payload) for the relay, in
-- the arrays' order; a balance without a row gets none.
WITH moved AS (
    UPDATE balances b
    SET available = b.available + m.available, held = b.held + m.held, version = b.version + m.steps
    FROM unnest($2::text[], $3::text[], $4::numeric[], $5::numeric[], $6::bigint[])
        AS m(account_id, asset, available, held, steps)
    WHERE b.account_id = m.account_id AND b.asset = m.asset
    RETURNING b.account_id, b.asset, b.version
)
INSERT INTO outbox (name, version, payload)
SELECT n.name, moved.version, n.name || '@' || moved.version
FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS n(name, account_id, asset, position)
JOIN moved ON moved.account_id = n.account_id AND moved.asset = n.asset
ORDER BY n.position
RETURNING id, name, version, payload
