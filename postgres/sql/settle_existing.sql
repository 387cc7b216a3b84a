-- The orders of a settlement batch ($1, their ids) that have a row already:
-- redeliveries, which change nothing. Read under the instrument locks, so a
-- settler of any of these orders that committed before is seen, and one
-- that did not waits for this commit.
SELECT id FROM orders WHERE id = ANY($1::text[])
