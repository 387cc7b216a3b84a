-- One outbox row per balance a settlement batch moved, at the version it
-- reached (read from the row, which the batch holds locked and has just
-- moved): $1 names (orders.BalanceName), $2 accounts, $3 assets, parallel
-- arrays, in (account, asset) order. The payload is name@version. Returns
-- the rows (id, name, version, payload) for the relay; a balance without a
-- row gets none.
INSERT INTO outbox (name, version, payload)
SELECT m.name, b.version, m.name || '@' || b.version
FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS m(name, account_id, asset, position)
JOIN balances b ON b.account_id = m.account_id AND b.asset = m.asset
ORDER BY m.position
RETURNING id, name, version, payload
