-- The orders of a settlement batch ($1, their ids) that have a row already:
-- redeliveries, which change nothing. Read under the instrument locks, so a
-- settler of any of these orders that committed before is seen, and one
-- that did not waits for this commit.
--
-- One primary-key probe per id: `id = ANY($1)`'s generic plan, cached while
-- orders was small, is a scan of every order.
SELECT o.id
FROM unnest($1::text[]) AS b(id)
CROSS JOIN LATERAL (SELECT id FROM orders WHERE id = b.id LIMIT 1) o
