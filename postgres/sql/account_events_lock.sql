-- Takes the transaction's advisory lock of each account's history, so two
-- archivers writing chunks of one account go one after the other and the
-- second sees what the first wrote (account_events_archive.sql runs next in
-- the same transaction, under a snapshot taken after the locks).
-- $1 text[]: the accounts, sorted, so that archivers lock in one order and
--            never wait for each other in a circle
-- Rows: one per account, nothing to read
SELECT pg_advisory_xact_lock(hashtextextended('account_event_chunks:' || account, 0))
FROM unnest($1::text[]) AS account
