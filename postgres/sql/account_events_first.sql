-- The first sequence an account's history holds.
-- $1 text  the account
-- Rows: first_sequence; none when the history holds none of the account's
SELECT first_sequence FROM account_event_chunks
WHERE account_id = $1
ORDER BY last_sequence
LIMIT 1
