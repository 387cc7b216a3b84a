-- The chunks of an account's history holding its events after+1 to
-- after+count, oldest first. Sequences are consecutive and a chunk holds
-- fewer than $4 events, so those chunks end between after+1 and
-- after+count+$4: one range of the key.
-- $1 text    the account
-- $2 bigint  after: the last sequence the reader has
-- $3 bigint  count: how many events it wants at least
-- $4 bigint  the most events a chunk holds plus one (the table's check)
-- Rows: events, a JSON array of the chunk's events as the stream sends them
SELECT events FROM account_event_chunks
WHERE account_id = $1
  AND last_sequence > $2 AND last_sequence < $2 + $3 + $4
  AND first_sequence <= $2 + $3
ORDER BY last_sequence
