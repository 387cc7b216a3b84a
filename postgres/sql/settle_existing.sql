-- The orders of a settlement batch ($1, their ids) that have a row already:
-- redeliveries, which change nothing. Read under the instrument locks, so a
-- settler of any of these orders that committed before is seen, and one
-- that did not waits for this commit.
--
-- One primary-key probe per id: `id = ANY($1)`'s generic plan, cached while
-- orders was small, is a scan of every order. The probe asks for its key
-- in id order, which only orders_pkey gives without a sort: on statistics
-- of an orders table of one row, "id = key" through an index holding id as
-- a later column (orders_account_status_newest) costs the same, and read
-- that index whole per key (migration 0028 has the same probe).
SELECT o.id
FROM unnest($1::text[]) AS b(id)
CROSS JOIN LATERAL (SELECT id FROM orders WHERE id >= b.id AND id <= b.id ORDER BY id LIMIT 1) o
