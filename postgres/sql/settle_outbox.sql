-- One outbox row per balance a transaction moved, at the version it
-- reached: $1 names (orders.BalanceName), $2 versions, $3 payloads. Returns
-- the rows (id, name, version, payload) for the relay.
INSERT INTO outbox (name, version, payload)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])
RETURNING id, name, version, payload
