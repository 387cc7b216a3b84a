-- Moves the balances a settlement write changed, by explicit deltas, and
-- writes the outbox rows that announce them, in one statement: $1 names
-- (orders.BalanceName), $2 accounts, $3 assets, $4 what the write moved
-- available by, $5 held by (numeric), $6 the version's steps (bigint: one
-- per ledger entry, one per hold or release), parallel arrays in (account,
-- asset) order; $7 the name of the write's one row
-- (orders.BalancesWriteName), or '' for a row per balance. The rows are
-- locked already (settle_lock.sql), each named once.
--
-- The write's one row lists each moved balance at the version it reaches,
-- "<name>@<version>" a line in the arrays' order; the relay carries each
-- line as a balance's own row would be (orders.BalanceEntries) and deletes
-- the row once all are carried. Its version is its own id: one value of
-- the outbox's id sequence taken for both, so the row is unique under the
-- one name (UNIQUE (name, version)). One row a write, where a row a
-- balance cost an insert and, once relayed, a delete per balance. A row
-- per balance (name, the version it reaches, "<name>@<version>") is the
-- form relays of earlier releases read (postgres.Settler.WithBalanceRowEach).
--
-- Returns the outbox rows (id, name, version, payload) for the relay, a
-- balance's in the arrays' order; none when no balance in the arrays has a
-- row.
WITH moved AS (
    UPDATE balances b
    SET available = b.available + m.available, held = b.held + m.held, version = b.version + m.steps
    FROM unnest($2::text[], $3::text[], $4::numeric[], $5::numeric[], $6::bigint[])
        AS m(account_id, asset, available, held, steps)
    WHERE b.account_id = m.account_id AND b.asset = m.asset
    RETURNING b.account_id, b.asset, b.version
),
reached AS (
    SELECT n.position, n.name, moved.version
    FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS n(name, account_id, asset, position)
    JOIN moved ON moved.account_id = n.account_id AND moved.asset = n.asset
),
listed AS (
    -- No group, so one row, or none when nothing moved: the sequence is
    -- read only for a row that is written.
    SELECT nextval('outbox_id_seq') AS id,
        string_agg(reached.name || '@' || reached.version, E'\n' ORDER BY reached.position) AS payload
    FROM reached
    WHERE $7::text <> ''
    HAVING count(*) > 0
)
INSERT INTO outbox (id, name, version, payload) OVERRIDING SYSTEM VALUE
SELECT listed.id, $7::text, listed.id, listed.payload
FROM listed
UNION ALL
SELECT nextval('outbox_id_seq'), ordered.name, ordered.version, ordered.name || '@' || ordered.version
FROM (SELECT * FROM reached WHERE $7::text = '' ORDER BY reached.position) AS ordered
RETURNING id, name, version, payload
