-- When the transaction that last wrote each order's row committed: for a
-- filled order, the settlement that filled it. Needs the server's
-- track_commit_timestamp (the bench's own server has it on).
-- $1 text[]  order ids
-- Rows: id, commit time (NULL when the server has no timestamp for it)
SELECT id, pg_xact_commit_timestamp(xmin) FROM orders WHERE id = ANY($1)
