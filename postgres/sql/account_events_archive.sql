-- Writes one chunk of events per account, each only if it starts past the
-- last event the history holds for its account: a chunk starting at or
-- below it holds events written already (by another archiver, or by this
-- one before a crash kept it from marking them archived in Redis), and is
-- not written. Runs after account_events_lock.sql in the same transaction.
-- $1 text[]   the accounts, each once
-- $2 bigint[] each chunk's first sequence
-- $3 bigint[] each chunk's last sequence (consecutive events in between)
-- $4 text[]   each chunk's events: a JSON array of the events as the
--             stream sends them
-- Rows: account_id, the last sequence the history holds for the account
--       after the write (0: none)
WITH chunk AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[])
        AS c (account_id, first_sequence, last_sequence, events)
), held AS (
    SELECT chunk.*, (SELECT max(h.last_sequence) FROM account_event_chunks h
                     WHERE h.account_id = chunk.account_id) AS held
    FROM chunk
), written AS (
    INSERT INTO account_event_chunks (account_id, first_sequence, last_sequence, events)
    SELECT account_id, first_sequence, last_sequence, events FROM held
    WHERE held IS NULL OR held < first_sequence
    RETURNING account_id, last_sequence
)
SELECT held.account_id, coalesce(written.last_sequence, held.held, 0)
FROM held LEFT JOIN written USING (account_id)
