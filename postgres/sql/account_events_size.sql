-- What the history takes on disk: the table, its compressed values
-- (TOAST) and its indexes, in bytes.
-- Rows: bytes
SELECT pg_total_relation_size('account_event_chunks')
